use super::codec::{self, Special};
use super::descriptor::{Label, Presence, Scalar, Shape, Ty};
use super::*;
use crate::resource::{Builtin, builtin_types, strategy};
use serde_json::json;

/// How often one message type may repeat on the path from the root in [`sample`] (CRD schemas are recursive).
const SAMPLE_RECURSION: usize = 2;

fn sample_scalar(scalar: Scalar) -> Value {
    match scalar {
        Scalar::String => json!("s"),
        Scalar::Bytes => json!("AQI="),
        Scalar::Bool => json!(true),
        Scalar::Int32 => json!(7),
        Scalar::Int64 => json!(70000000000i64),
        Scalar::Double => json!(1.5),
    }
}

fn sample_special(kind: Special, path: &mut Vec<&'static str>) -> Value {
    match kind {
        Special::Time => json!("2026-01-02T03:04:05Z"),
        Special::MicroTime => json!("2026-01-02T03:04:05.123456Z"),
        Special::Duration => json!("1m30s"),
        Special::IntOrString => json!("25%"),
        Special::Quantity => json!("100m"),
        Special::RawJson => json!({"f:a": {}}),
        Special::SchemaOrArray => schema_props_sample(path),
        Special::SchemaOrBool => json!(true),
        Special::SchemaOrStringArray => json!(["a", "b"]),
    }
}

fn schema_props_sample(path: &mut Vec<&'static str>) -> Value {
    let props = codec::message_named("k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps");
    let props = props.expect("the schema has JSONSchemaProps");
    if path.iter().filter(|n| **n == props.name).count() >= SAMPLE_RECURSION {
        return json!({"type": "string"});
    }
    sample_at(props, path)
}

/// An object with every field of `message` set to a value that is not the zero value.
fn sample(message: &'static Message) -> Value {
    sample_at(message, &mut Vec::new())
}

fn sample_at(message: &'static Message, path: &mut Vec<&'static str>) -> Value {
    if let Some(kind) = codec::special(message.name) {
        return sample_special(kind, path);
    }
    path.push(message.name);
    let mut object = serde_json::Map::new();
    for field in message.fields {
        let value = match field.ty {
            Ty::Scalar(scalar) => sample_scalar(scalar),
            Ty::Message(index) => {
                let nested = codec::message_at(index);
                if path.iter().filter(|n| **n == nested.name).count() >= SAMPLE_RECURSION {
                    continue;
                }
                sample_at(nested, path)
            }
        };
        match (field.presence, field.label) {
            (Presence::Inline, _) => {
                for (key, value) in value.as_object().cloned().unwrap_or_default() {
                    object.insert(key, value);
                }
            }
            (_, Label::One) => {
                object.insert(field.json.to_owned(), value);
            }
            (_, Label::Repeated) => {
                object.insert(field.json.to_owned(), json!([value]));
            }
            (_, Label::Map) => {
                object.insert(field.json.to_owned(), json!({"k": value}));
            }
        }
    }
    path.pop();
    match message.shape {
        Shape::Wrapper => {
            Value::Array(object.into_values().flat_map(|v| v.as_array().cloned().unwrap_or_default()).collect())
        }
        _ => Value::Object(object),
    }
}

/// Removes the `apiVersion` and `kind` members `openapi` has where `sample` has none.
fn strip_added_type_meta(openapi: &mut Value, sample: &Value) {
    match (openapi, sample) {
        (Value::Object(members), Value::Object(wanted)) => {
            for key in ["apiVersion", "kind"] {
                if !wanted.contains_key(key) {
                    members.remove(key);
                }
            }
            for (key, value) in members.iter_mut() {
                if let Some(wanted) = wanted.get(key) {
                    strip_added_type_meta(value, wanted);
                }
            }
        }
        (Value::Array(items), Value::Array(wanted)) => {
            items.iter_mut().zip(wanted).for_each(|(item, wanted)| strip_added_type_meta(item, wanted));
        }
        _ => {}
    }
}

/// The first path where `a` and `b` differ, with both values there.
fn difference(a: &Value, b: &Value) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for key in x.keys().chain(y.keys()) {
                match (x.get(key), y.get(key)) {
                    (Some(p), Some(q)) => {
                        if let Some(d) = difference(p, q) {
                            return Some(format!(".{key}{d}"));
                        }
                    }
                    (p, q) => return Some(format!(".{key}: {p:?} != {q:?}")),
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (p, q))| difference(p, q).map(|d| format!("[{i}]{d}")))
        }
        _ if a == b => None,
        _ => Some(format!(": {a} != {b}")),
    }
}

#[track_caller]
fn assert_same(left: &Value, right: &Value, what: &str) {
    if let Some(d) = difference(left, right) {
        panic!("{what} differs at {d}");
    }
}

fn round_trip(message: &Message, value: &Value) -> Value {
    let mut encoder = Encoder::strict();
    let bytes = encoder.encode(message, value).unwrap_or_else(|e| panic!("{}: {e}", message.name));
    assert_eq!(encoder.unknown, Vec::<String>::new(), "{} has members the schema lacks", message.name);
    codec::decode(message, &bytes).unwrap_or_else(|e| panic!("{}: {e}", message.name))
}

#[test]
fn every_served_built_in_kind_and_its_list_round_trip_with_every_field_set() {
    for rt in builtin_types() {
        let api_version = rt.api_version();
        let message = message_for(&api_version, &rt.kind).unwrap_or_else(|| panic!("no message for {}", rt.kind));
        let mut object = sample(message);
        object["apiVersion"] = json!(api_version);
        object["kind"] = json!(rt.kind);
        // The JSON names and shapes are those of the k8s-openapi type too (an unknown member would be dropped).
        let mut decoded_by_openapi = strategy::normalize(&rt, object.clone()).unwrap();
        // k8s-openapi writes apiVersion and kind into embedded objects (StatefulSet volumeClaimTemplates).
        strip_added_type_meta(&mut decoded_by_openapi, &object);
        assert_same(&decoded_by_openapi, &object, &format!("{} through k8s-openapi", rt.kind));

        let body = encode(&object).unwrap();
        assert!(body.starts_with(&MAGIC));
        assert_same(&decode(&body).unwrap(), &object, &rt.kind);

        let list_kind = format!("{}List", rt.kind);
        let Some(list_message) = message_for(&api_version, &list_kind) else {
            // The access reviews are create-only: upstream has no list of them.
            assert!(rt.builtin().is_some_and(Builtin::is_review), "no {list_kind}");
            continue;
        };
        let list = json!({"apiVersion": api_version, "kind": list_kind,
                          "metadata": {"resourceVersion": "12", "continue": "c", "remainingItemCount": 3},
                          "items": [object.clone(), object]});
        let decoded = decode(&encode(&list).unwrap()).unwrap();
        assert_eq!(decoded["items"].as_array().map(Vec::len), Some(2));
        assert_eq!(decoded["metadata"], list["metadata"]);
        assert!(list_message.fields.iter().any(|f| f.json == "items"));
    }
}

#[test]
fn every_message_round_trips_with_every_field_set() {
    for message in super::schema::MESSAGES {
        if message.shape == Shape::Special && codec::special(message.name).is_none() {
            continue;
        }
        let value = sample(message);
        assert_same(&round_trip(message, &value), &value, message.name);
    }
}

#[test]
fn shared_kinds_come_from_meta_v1_whatever_the_group() {
    assert_eq!(message_for("v1", "Status").map(|m| m.name), Some("k8s.io.apimachinery.pkg.apis.meta.v1.Status"));
    assert_eq!(
        message_for("apps/v1", "DeleteOptions").map(|m| m.name),
        Some("k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions")
    );
    assert_eq!(message_for("policy/v1", "Eviction").map(|m| m.name), Some("k8s.io.api.policy.v1.Eviction"));
    assert!(message_for("example.com/v1", "Widget").is_none());
    assert!(message_for("meta.k8s.io/v1", "Table").is_none(), "Table has no protobuf form");
    assert!(has_message("apps", "v1", "Deployment"));
    assert!(!has_message("apps", "v1", "Status"));
}

/// The message bytes of `fields`: (tag, value) pairs, strings length-delimited, numbers varints.
fn message_bytes(fields: &[(u32, Value)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (tag, value) in fields {
        match value {
            Value::String(s) => codec::put_bytes(&mut out, *tag, s.as_bytes()),
            Value::Number(n) => codec::put_int(&mut out, *tag, n.as_i64().unwrap()),
            Value::Bool(b) => codec::put_int(&mut out, *tag, i64::from(*b)),
            Value::Array(raw) => {
                let raw: Vec<u8> = raw.iter().map(|b| b.as_u64().unwrap() as u8).collect();
                codec::put_bytes(&mut out, *tag, &raw);
            }
            other => panic!("{other}"),
        }
    }
    out
}

fn bytes_of(raw: &[u8]) -> Value {
    Value::Array(raw.iter().map(|b| json!(b)).collect())
}

#[test]
fn zero_values_show_as_the_go_type_marshals_them() {
    // A Deployment as a Go client writes it: every non-pointer field, zero or not.
    let container =
        message_bytes(&[(1, json!("web")), (2, json!("nginx")), (14, json!("")), (13, json!("")), (8, bytes_of(&[]))]);
    let pod_spec = message_bytes(&[(2, bytes_of(&container)), (3, json!("")), (10, json!("")), (11, json!(false))]);
    let template_metadata = message_bytes(&[(1, json!("")), (8, bytes_of(&[]))]);
    let template = message_bytes(&[(1, bytes_of(&template_metadata)), (2, bytes_of(&pod_spec))]);
    let metadata = message_bytes(&[(1, json!("d")), (2, json!("")), (3, json!("")), (7, json!(0)), (8, bytes_of(&[]))]);
    let spec = message_bytes(&[(1, json!(0)), (3, bytes_of(&template)), (5, json!(0)), (7, json!(false))]);
    let raw = message_bytes(&[(1, bytes_of(&metadata)), (2, bytes_of(&spec)), (3, bytes_of(&[]))]);
    let body = envelope("apps/v1", "Deployment", &raw);
    let deployment = decode(&body).unwrap();
    assert_eq!(
        deployment,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "d", "creationTimestamp": null},
               "spec": {"replicas": 0, "template": {"metadata": {"creationTimestamp": null},
                        "spec": {"containers": [{"name": "web", "image": "nginx", "resources": {}}]}}},
               "status": {}}),
        "a pointer keeps its zero (replicas), omitempty drops it (minReadySeconds, paused, imagePullPolicy)"
    );
    // `key` of a ConfigMapKeySelector has no omitempty: a Go client that leaves it out still means "".
    let selector = codec::message_named("k8s.io.api.core.v1.ConfigMapKeySelector").unwrap();
    let name = message_bytes(&[(1, json!("settings"))]);
    let decoded = codec::decode(selector, &message_bytes(&[(1, bytes_of(&name))])).unwrap();
    assert_eq!(decoded, json!({"name": "settings", "key": ""}), "the inlined LocalObjectReference's name is a member");
}

#[test]
fn special_json_forms_match_the_go_types() {
    let time = codec::message_named("k8s.io.apimachinery.pkg.apis.meta.v1.Time").unwrap();
    assert_eq!(codec::decode(time, &[]).unwrap(), Value::Null, "a zero time is null");
    assert_eq!(round_trip(time, &json!("1970-01-01T00:00:00Z")), json!("1970-01-01T00:00:00Z"));
    let with_nanos = message_bytes(&[(1, json!(1_767_323_045)), (2, json!(999))]);
    assert_eq!(codec::decode(time, &with_nanos).unwrap(), json!("2026-01-02T03:04:05Z"), "Time keeps seconds");
    let micro = codec::message_named("k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime").unwrap();
    assert_eq!(round_trip(micro, &json!("2026-01-02T03:04:05.000001Z")), json!("2026-01-02T03:04:05.000001Z"));
    let int_or_string = codec::message_named("k8s.io.apimachinery.pkg.util.intstr.IntOrString").unwrap();
    for value in [json!(3), json!(-1), json!("25%"), json!("")] {
        assert_eq!(round_trip(int_or_string, &value), value);
    }
    let quantity = codec::message_named("k8s.io.apimachinery.pkg.api.resource.Quantity").unwrap();
    assert_eq!(round_trip(quantity, &json!(2)), json!("2"), "a number quantity is read as its string");
    let or_bool =
        codec::message_named("k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool").unwrap();
    assert_eq!(round_trip(or_bool, &json!(false)), json!(false));
    assert_eq!(round_trip(or_bool, &json!({"type": "string"})), json!({"type": "string"}));
    let or_array =
        codec::message_named("k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray")
            .unwrap();
    assert_eq!(round_trip(or_array, &json!([{"type": "string"}])), json!([{"type": "string"}]));
    let secret = message_for("v1", "Secret").unwrap();
    let value = json!({"data": {"k": "AAEC/w=="}, "stringData": {"s": "t"}, "type": "Opaque"});
    assert_eq!(round_trip(secret, &value), value, "bytes are base64 in JSON");
    for (nanos, text) in [(0, "0s"), (1_500_000, "1.5ms"), (90_000_000_000, "1m30s"), (3_723_500_000_000, "1h2m3.5s")] {
        assert_eq!(codec::format_go_duration(nanos), text);
        assert_eq!(codec::parse_go_duration(text), Some(nanos));
    }
    assert_eq!(codec::parse_go_duration("1x"), None);
}

#[test]
fn a_watch_frame_is_a_length_and_a_watch_event_around_the_body() {
    let body = encode(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})).unwrap();
    let frame = watch_frame("ADDED", &body);
    let length = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(length, frame.len() - 4);
    let event = codec::decode(message_for("v1", "WatchEvent").unwrap(), &frame[4..]);
    // The object's raw bytes are a protobuf body, not JSON: read it by hand.
    assert!(event.is_err(), "RawExtension holds JSON for JSON clients only");
    let mut reader = codec::Reader::new(&frame[4..]);
    let (tag, codec::WireValue::Bytes(kind)) = reader.next_field().unwrap().unwrap() else { panic!() };
    assert_eq!((tag, kind), (1, &b"ADDED"[..]));
    let (_, codec::WireValue::Bytes(object)) = reader.next_field().unwrap().unwrap() else { panic!() };
    let (_, codec::WireValue::Bytes(raw)) = codec::Reader::new(object).next_field().unwrap().unwrap() else { panic!() };
    assert_eq!(decode(raw).unwrap()["metadata"]["name"], "a");
}

#[test]
fn bad_bodies_are_errors_never_panics() {
    assert_eq!(decode(b"{}"), Err(ProtobufError::NoMagic));
    assert_eq!(decode(&envelope("v1", "", b"")), Err(ProtobufError::MissingKind));
    assert!(matches!(decode(&envelope("v1", "Widget", b"")), Err(ProtobufError::UnknownKind { .. })));
    let object = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
                        "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]}});
    let body = encode(&object).unwrap();
    for end in MAGIC.len()..body.len() {
        let _ = decode(&body[..end]);
    }
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..2000 {
        let mut garbled = body.clone();
        for _ in 0..3 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = MAGIC.len() + (seed as usize) % (garbled.len() - MAGIC.len());
            garbled[at] = (seed >> 32) as u8;
        }
        let _ = decode(&garbled);
    }
    let deep =
        (0..200).fold(json!({"type": "object"}), |inner, _| json!({"type": "object", "properties": {"x": inner}}));
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                     "spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": deep}}]}});
    assert_eq!(encode(&crd), Err(ProtobufError::Codec(CodecError::TooDeep)));
    let wrong = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": 1}});
    let Err(ProtobufError::Codec(CodecError::Json { field, .. })) = encode(&wrong) else { panic!() };
    assert_eq!(field, "data");
}

/// Decodes `bytes` as the prost type of k8s-pb named like `message` and encodes it again: fields the prost type
/// does not know (a wrong tag) or cannot read (a wrong wire type) get lost or fail there.
fn through_prost(message: &str, bytes: &[u8]) -> Option<Vec<u8>> {
    use k8s_pb::api::{
        admissionregistration, apps, authentication, authorization, autoscaling, batch, coordination, core, events,
        policy, rbac, scheduling,
    };
    use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions;
    use k8s_pb::apimachinery::pkg::apis::meta;
    fn via<T: prost::Message + Default>(bytes: &[u8]) -> Vec<u8> {
        T::decode(bytes).unwrap_or_else(|e| panic!("{}: {e}", std::any::type_name::<T>())).encode_to_vec()
    }
    let (package, kind) = message.rsplit_once('.')?;
    macro_rules! kinds {
        ($module:path: $($kind:ident),*) => {{
            use $module as m;
            match kind {
                $(stringify!($kind) => Some(via::<m::$kind>(bytes)),)*
                _ => None,
            }
        }};
    }
    match package {
        "k8s.io.api.core.v1" => kinds!(core::v1: Namespace, NamespaceList, Node, NodeList, Pod, PodList, ConfigMap,
            ConfigMapList, Secret, SecretList, ServiceAccount, ServiceAccountList, Event, EventList, Binding, Service,
            ServiceList),
        "k8s.io.api.events.v1" => kinds!(events::v1: Event, EventList),
        "k8s.io.api.policy.v1" => kinds!(policy::v1: PodDisruptionBudget, PodDisruptionBudgetList, Eviction),
        "k8s.io.api.coordination.v1" => kinds!(coordination::v1: Lease, LeaseList),
        "k8s.io.api.apps.v1" => kinds!(apps::v1: Deployment, DeploymentList, ReplicaSet, ReplicaSetList, StatefulSet,
            StatefulSetList, DaemonSet, DaemonSetList, ControllerRevision, ControllerRevisionList),
        "k8s.io.api.autoscaling.v1" => kinds!(autoscaling::v1: Scale),
        "k8s.io.api.batch.v1" => kinds!(batch::v1: Job, JobList),
        "k8s.io.api.scheduling.v1" => kinds!(scheduling::v1: PriorityClass, PriorityClassList),
        "k8s.io.api.rbac.v1" => kinds!(rbac::v1: Role, RoleList, ClusterRole, ClusterRoleList, RoleBinding,
            RoleBindingList, ClusterRoleBinding, ClusterRoleBindingList),
        "k8s.io.api.authorization.v1" => kinds!(authorization::v1: SelfSubjectAccessReview, SelfSubjectRulesReview,
            SubjectAccessReview, LocalSubjectAccessReview),
        "k8s.io.api.authentication.v1" => kinds!(authentication::v1: TokenReview, SelfSubjectReview, TokenRequest),
        "k8s.io.api.admissionregistration.v1" => kinds!(admissionregistration::v1: ValidatingAdmissionPolicy,
            ValidatingAdmissionPolicyList, ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingList),
        "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1" => {
            kinds!(apiextensions::v1: CustomResourceDefinition, CustomResourceDefinitionList)
        }
        "k8s.io.apimachinery.pkg.apis.meta.v1" => {
            kinds!(meta::v1: Status, DeleteOptions, PartialObjectMetadata, PartialObjectMetadataList)
        }
        _ => None,
    }
}

#[test]
fn the_tags_and_wire_types_agree_with_the_k8s_pb_prost_types() {
    let mut checked = Vec::new();
    let mut names: Vec<String> = builtin_types()
        .iter()
        .flat_map(|rt| [rt.kind.clone(), format!("{}List", rt.kind)].map(|k| (rt.api_version(), k)))
        .filter_map(|(api_version, kind)| message_for(&api_version, &kind).map(|m| m.name.to_owned()))
        .collect();
    names.extend(
        [
            "v1.Status",
            "v1.DeleteOptions",
            "v1.PartialObjectMetadataList",
            "policy/v1.Eviction",
            "autoscaling/v1.Scale",
            "v1.Binding",
            "v1.Service",
            "batch/v1.Job",
            "scheduling.k8s.io/v1.PriorityClass",
            "rbac.authorization.k8s.io/v1.ClusterRole",
            "rbac.authorization.k8s.io/v1.RoleBinding",
            "authorization.k8s.io/v1.SelfSubjectAccessReview",
            "authorization.k8s.io/v1.SelfSubjectRulesReview",
            "authentication.k8s.io/v1.TokenRequest",
            "admissionregistration.k8s.io/v1.ValidatingAdmissionPolicy",
            "admissionregistration.k8s.io/v1.ValidatingAdmissionPolicyBinding",
        ]
        .iter()
        .map(|k| {
            let (api_version, kind) = k.rsplit_once('.').unwrap();
            message_for(api_version, kind).unwrap_or_else(|| panic!("{k}")).name.to_owned()
        }),
    );
    for name in names {
        let message = codec::message_named(&name).unwrap();
        let value = sample(message);
        let bytes = Encoder::strict().encode(message, &value).unwrap();
        let again = through_prost(message.name, &bytes).unwrap_or_else(|| panic!("no k8s-pb type for {name}"));
        assert_same(&codec::decode(message, &again).unwrap(), &value, message.name);
        checked.push(name);
    }
    assert!(checked.len() >= 40, "{checked:?}");
}
