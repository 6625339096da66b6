//! batch/v1 Job: upstream's defaulting (`SetDefaults_Job`), selector generation and validation.
//!
//! # Guarantees
//! - A new Job gets `parallelism`/`completions` 1 when both are absent (else `parallelism` 1), `backoffLimit` 6,
//!   `completionMode: NonIndexed`, `suspend: false`, `manualSelector: false`,
//!   `podReplacementPolicy: TerminatedOrFailed`, and, unless `manualSelector` is true, the labels
//!   `controller-uid`, `batch.kubernetes.io/controller-uid`, `job-name`, `batch.kubernetes.io/job-name` on its
//!   template and the selector `batch.kubernetes.io/controller-uid: <uid>`; a Job without labels shows its
//!   template's (as a real server returns it).
//! - Validation refuses what upstream's `ValidateJob`/`ValidateJobUpdate` refuse among: negative counts and
//!   durations, a `restartPolicy` other than `OnFailure`/`Never`, a selector that does not match the template or
//!   was not generated, and changes to `completions`, `selector`, `completionMode` or the template (the
//!   scheduling directives and template labels and annotations may change while the Job is suspended and never
//!   started).
//! - Stricter than upstream, said in the error: `completionMode: Indexed`, `podFailurePolicy`, `successPolicy`,
//!   `backoffLimitPerIndex` and `managedBy` are refused (the dev cluster's Job controller does not implement them).

use super::defaulting::set_default;
use super::pod::{default_pod_spec, validate_containers};
use crate::object::{metadata_mut, name_of};
use crate::schema::{ErrorKind, FieldError, field_error};
use crate::selector::label::LabelSelector;
use serde_json::{Map, Value, json};

/// The label every Job pod carries with the Job's uid, which the generated selector selects.
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// The label every Job pod carries with the Job's name.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// The labels upstream still sets beside the prefixed ones.
const LEGACY_CONTROLLER_UID_LABEL: &str = "controller-uid";
const LEGACY_JOB_NAME_LABEL: &str = "job-name";

fn manual_selector(job: &Value) -> bool {
    job.pointer("/spec/manualSelector").and_then(Value::as_bool) == Some(true)
}

/// `SetDefaults_Job` and the pod template defaults.
fn default_spec(job: &mut Value) {
    let Some(spec) = job.get_mut("spec").filter(|s| s.is_object()) else { return };
    let absent = |spec: &Value, key: &str| spec.get(key).is_none_or(Value::is_null);
    if absent(spec, "completions") && absent(spec, "parallelism") {
        set_default(spec, "completions", json!(1));
    }
    set_default(spec, "parallelism", json!(1));
    set_default(spec, "backoffLimit", json!(6));
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    set_default(spec, "manualSelector", json!(false));
    let replacement = if absent(spec, "podFailurePolicy") { "TerminatedOrFailed" } else { "Failed" };
    set_default(spec, "podReplacementPolicy", json!(replacement));
    if let Some(pod_spec) = spec.pointer_mut("/template/spec") {
        default_pod_spec(pod_spec);
    }
}

/// Upstream `generateSelector`: labels the template with the Job's uid and name and selects the uid.
fn generate_selector(job: &mut Value) {
    let uid = job.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_owned();
    let name = name_of(job).to_owned();
    let Some(spec) = job.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let template = spec.entry("template").or_insert_with(|| json!({}));
    if let Some(template) = template.as_object_mut() {
        let metadata = template.entry("metadata").or_insert_with(|| json!({}));
        if let Some(metadata) = metadata.as_object_mut() {
            let labels = metadata.entry("labels").or_insert_with(|| json!({}));
            if let Some(labels) = labels.as_object_mut() {
                for key in [LEGACY_JOB_NAME_LABEL, JOB_NAME_LABEL] {
                    labels.entry(key).or_insert_with(|| json!(name));
                }
                for key in [LEGACY_CONTROLLER_UID_LABEL, CONTROLLER_UID_LABEL] {
                    labels.entry(key).or_insert_with(|| json!(uid));
                }
            }
        }
    }
    let selector = spec.entry("selector").or_insert_with(|| json!({}));
    if selector.is_null() {
        *selector = json!({});
    }
    if let Some(selector) = selector.as_object_mut() {
        let match_labels = selector.entry("matchLabels").or_insert_with(|| json!({}));
        if let Some(match_labels) = match_labels.as_object_mut() {
            match_labels.entry(CONTROLLER_UID_LABEL).or_insert_with(|| json!(uid));
        }
    }
}

/// Defaults a new Job and clears its status.
pub fn prepare_create(job: &mut Value) {
    default_spec(job);
    if let Some(fields) = job.as_object_mut() {
        fields.insert("status".into(), json!({}));
    }
}

/// Generates the selector of a new Job once its uid and name are set (they are part of it) and, for a Job
/// without labels, shows its template's.
pub fn generate_selector_and_labels(job: &mut Value) {
    if !manual_selector(job) {
        generate_selector(job);
    }
    let template_labels = job.pointer("/spec/template/metadata/labels").cloned();
    let has_labels = job.pointer("/metadata/labels").and_then(Value::as_object).is_some_and(|l| !l.is_empty());
    if let Some(labels) = template_labels.filter(|l| l.as_object().is_some_and(|l| !l.is_empty()))
        && !has_labels
    {
        metadata_mut(job).insert("labels".into(), labels);
    }
}

/// Defaults an updated Job.
pub fn prepare_update(job: &mut Value) {
    default_spec(job);
}

fn nonnegative(spec: &Value, key: &str, errors: &mut Vec<FieldError>) {
    if let Some(value) = spec.get(key).and_then(Value::as_i64)
        && value < 0
    {
        errors.push(field_error(
            &format!("spec.{key}"),
            ErrorKind::Invalid,
            format!("Invalid value: {value}: must be greater than or equal to 0"),
        ));
    }
}

fn immutable(path: &str, new: Option<&Value>, old: Option<&Value>, errors: &mut Vec<FieldError>) {
    if new != old {
        let shown = new.cloned().unwrap_or(Value::Null);
        errors.push(field_error(path, ErrorKind::Invalid, format!("Invalid value: {shown}: field is immutable")));
    }
}

/// The template without what may change while a Job is suspended and never started (upstream
/// `AllowMutableSchedulingDirectives`, and the template's labels and annotations).
fn fixed_template(template: Option<&Value>) -> Value {
    let mut template = template.cloned().unwrap_or(Value::Null);
    if let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut) {
        for key in ["nodeSelector", "affinity", "tolerations", "schedulingGates"] {
            spec.remove(key);
        }
    }
    if let Some(metadata) = template.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("labels");
        metadata.remove("annotations");
    }
    template
}

/// Validates a new Job (`old` is `None`) or an update.
pub fn validate(job: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let empty = Value::Object(Map::new());
    let spec = job.get("spec").unwrap_or(&empty);
    for key in ["parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "ttlSecondsAfterFinished"] {
        nonnegative(spec, key, &mut errors);
    }
    match spec.get("completionMode").and_then(Value::as_str) {
        None | Some("NonIndexed") => {}
        Some("Indexed") => errors.push(field_error(
            "spec.completionMode",
            ErrorKind::Forbidden,
            "Forbidden: Indexed Jobs are not implemented by the dev cluster",
        )),
        Some(other) => errors.push(field_error(
            "spec.completionMode",
            ErrorKind::NotSupported,
            format!("Unsupported value: {other:?}: supported values: \"NonIndexed\", \"Indexed\""),
        )),
    }
    for key in ["podFailurePolicy", "successPolicy", "backoffLimitPerIndex", "maxFailedIndexes", "managedBy"] {
        if spec.get(key).is_some_and(|v| !v.is_null()) {
            errors.push(field_error(
                &format!("spec.{key}"),
                ErrorKind::Forbidden,
                "Forbidden: not implemented by the dev cluster's Job controller",
            ));
        }
    }
    let template = spec.get("template");
    let restart = template.and_then(|t| t.pointer("/spec/restartPolicy")).and_then(Value::as_str).unwrap_or("");
    if restart != "OnFailure" && restart != "Never" {
        let (kind, message) = if restart.is_empty() {
            (ErrorKind::Required, "Required value: valid values: \"OnFailure\", \"Never\"".to_owned())
        } else {
            (
                ErrorKind::NotSupported,
                format!("Unsupported value: {restart:?}: supported values: \"OnFailure\", \"Never\""),
            )
        };
        errors.push(field_error("spec.template.spec.restartPolicy", kind, message));
    }
    match template.and_then(|t| t.get("spec")) {
        Some(pod_spec) => validate_containers(pod_spec, "spec.template.spec", &mut errors),
        None => errors.push(field_error("spec.template.spec.containers", ErrorKind::Required, "Required value")),
    }
    let template_labels = template.and_then(|t| t.pointer("/metadata/labels")).and_then(Value::as_object);
    match spec.get("selector").filter(|s| !s.is_null()) {
        None => errors.push(field_error("spec.selector", ErrorKind::Required, "Required value")),
        Some(selector) => match LabelSelector::from_object(selector) {
            Err(why) => errors.push(field_error(
                "spec.selector",
                ErrorKind::Invalid,
                format!("Invalid value: {selector}: {why}"),
            )),
            Ok(parsed) => {
                if !parsed.matches_map(template_labels) {
                    errors.push(field_error(
                        "spec.template.metadata.labels",
                        ErrorKind::Invalid,
                        format!(
                            "Invalid value: {}: `selector` does not match template `labels`",
                            template_labels.map(|l| Value::Object(l.clone())).unwrap_or_default()
                        ),
                    ));
                }
                if !manual_selector(job) {
                    validate_generated_selector(job, &parsed, template_labels, selector, &mut errors);
                }
            }
        },
    }
    if let Some(old) = old {
        let old_spec = old.get("spec").unwrap_or(&empty);
        for key in ["completions", "selector", "completionMode"] {
            immutable(&format!("spec.{key}"), spec.get(key), old_spec.get(key), &mut errors);
        }
        let suspended = old_spec.get("suspend").and_then(Value::as_bool) == Some(true);
        let started = old.pointer("/status/startTime").is_some_and(|t| !t.is_null());
        let (new_template, old_template) = if suspended && !started {
            (fixed_template(template), fixed_template(old_spec.get("template")))
        } else {
            (template.cloned().unwrap_or(Value::Null), old_spec.get("template").cloned().unwrap_or(Value::Null))
        };
        if new_template != old_template {
            immutable("spec.template", template, old_spec.get("template"), &mut errors);
        }
    }
    errors
}

/// Upstream `validateGeneratedSelector`: the template carries the generated labels and the selector selects them.
fn validate_generated_selector(
    job: &Value,
    selector: &LabelSelector,
    template_labels: Option<&Map<String, Value>>,
    shown: &Value,
    errors: &mut Vec<FieldError>,
) {
    let uid = job.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
    let name = name_of(job);
    let expected = [
        (LEGACY_CONTROLLER_UID_LABEL, uid),
        (CONTROLLER_UID_LABEL, uid),
        (LEGACY_JOB_NAME_LABEL, name),
        (JOB_NAME_LABEL, name),
    ];
    for (key, value) in expected {
        match template_labels.and_then(|l| l.get(key)).and_then(Value::as_str) {
            Some(found) if found == value => {}
            Some(found) => errors.push(field_error(
                &format!("spec.template.metadata.labels[{key}]"),
                ErrorKind::Invalid,
                format!("Invalid value: {found:?}: must be '{value}'"),
            )),
            None => errors.push(field_error(
                &format!("spec.template.metadata.labels[{key}]"),
                ErrorKind::Required,
                format!("Required value: must be '{value}'"),
            )),
        }
    }
    let labels: Map<String, Value> = expected.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
    if !selector.matches_map(Some(&labels)) {
        errors.push(field_error(
            "spec.selector",
            ErrorKind::Invalid,
            format!("Invalid value: {shown}: `selector` not auto-generated"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_job(spec: Value) -> Value {
        let mut job = json!({"metadata": {"name": "pi", "namespace": "default", "uid": "u-1"}, "spec": spec});
        prepare_create(&mut job);
        generate_selector_and_labels(&mut job);
        job
    }

    fn template(restart: &str) -> Value {
        json!({"spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "busybox"}]}})
    }

    fn fields(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_new_job_gets_upstreams_defaults_and_a_generated_selector() {
        let job = new_job(json!({"template": template("Never")}));
        let spec = &job["spec"];
        assert_eq!((spec["completions"].clone(), spec["parallelism"].clone()), (json!(1), json!(1)));
        assert_eq!(spec["backoffLimit"], 6);
        assert_eq!(spec["completionMode"], "NonIndexed");
        assert_eq!(spec["suspend"], false);
        assert_eq!(spec["manualSelector"], false);
        assert_eq!(spec["podReplacementPolicy"], "TerminatedOrFailed");
        assert_eq!(spec["selector"], json!({"matchLabels": {CONTROLLER_UID_LABEL: "u-1"}}));
        let labels = &spec["template"]["metadata"]["labels"];
        assert_eq!(labels[CONTROLLER_UID_LABEL], "u-1");
        assert_eq!(labels["controller-uid"], "u-1");
        assert_eq!(labels[JOB_NAME_LABEL], "pi");
        assert_eq!(labels["job-name"], "pi");
        assert_eq!(job["metadata"]["labels"], *labels);
        assert_eq!(job["status"], json!({}));
        assert!(validate(&job, None).is_empty(), "{:?}", validate(&job, None));
        let parallel = new_job(json!({"parallelism": 3, "template": template("OnFailure")}));
        assert!(parallel["spec"].get("completions").is_none());
        let completions = new_job(json!({"completions": 4, "template": template("Never")}));
        assert_eq!(completions["spec"]["parallelism"], 1);
    }

    #[test]
    fn validation_refuses_what_upstream_refuses() {
        let always = new_job(json!({"template": template("Always")}));
        assert_eq!(
            fields(&validate(&always, None)),
            vec![
                "spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
            ]
        );
        let negative = new_job(json!({"backoffLimit": -1, "template": template("Never")}));
        assert_eq!(
            fields(&validate(&negative, None)),
            vec!["spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0"]
        );
        let foreign = new_job(json!({"selector": {"matchLabels": {"app": "x"}}, "template": template("Never")}));
        let errors = fields(&validate(&foreign, None));
        assert!(errors.iter().any(|e| e.contains("`selector` does not match template `labels`")), "{errors:?}");
        assert!(errors.iter().any(|e| e.contains("`selector` not auto-generated")), "{errors:?}");
        let stolen = new_job(json!({"template": {"metadata": {"labels": {"controller-uid": "other"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}));
        assert_eq!(
            fields(&validate(&stolen, None)),
            vec!["spec.template.metadata.labels[controller-uid]: Invalid value: \"other\": must be 'u-1'"]
        );
        let manual = new_job(json!({"manualSelector": true, "selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": {"app": "x"}},
                         "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}));
        assert!(validate(&manual, None).is_empty());
        let no_image =
            new_job(json!({"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}}}));
        assert_eq!(fields(&validate(&no_image, None)), vec!["spec.template.spec.containers[0].image: Required value"]);
        let indexed = new_job(json!({"completionMode": "Indexed", "completions": 2, "template": template("Never")}));
        assert_eq!(validate(&indexed, None)[0].field, "spec.completionMode");
    }

    #[test]
    fn the_template_is_immutable_unless_the_job_is_suspended_and_never_started() {
        let old = new_job(json!({"template": template("Never")}));
        let mut changed = old.clone();
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("other");
        assert_eq!(fields(&validate(&changed, Some(&old)))[0].split(':').next(), Some("spec.template"));
        let mut scheduled = old.clone();
        scheduled["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "n1"});
        assert_eq!(validate(&scheduled, Some(&old)).len(), 1);
        let mut suspended = old.clone();
        suspended["spec"]["suspend"] = json!(true);
        let mut pinned = suspended.clone();
        pinned["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "n1"});
        assert!(validate(&pinned, Some(&suspended)).is_empty());
        suspended["status"] = json!({"startTime": "2026-01-01T00:00:00Z"});
        assert_eq!(validate(&pinned, Some(&suspended)).len(), 1);
        let mut more = old.clone();
        more["spec"]["completions"] = json!(3);
        assert_eq!(validate(&more, Some(&old))[0].field, "spec.completions");
        let mut resumed = old.clone();
        resumed["spec"]["suspend"] = json!(true);
        resumed["spec"]["parallelism"] = json!(4);
        assert!(validate(&resumed, Some(&old)).is_empty());
    }
}
