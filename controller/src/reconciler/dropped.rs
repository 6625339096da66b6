//! Status writes the API server answered without some of the fields written.
//!
//! A NodeVersion CRD installed by an older release lacks the newer status fields in its schema, and the API
//! server prunes the fields a structural schema does not know from every write, the status subresource's
//! included (apiextensions-apiserver decodes each request body through `pkg/apiserver/customresource_handler.go`'s
//! schema-coercing converter, which calls `pkg/apiserver/schema/pruning`'s `PruneWithOptions`; only
//! `fieldValidation=Strict`, which the controller does not ask for, turns a pruned field into an error): it accepts
//! the write and answers, and stores, an object without them. The controller computes each status from
//! the last one, saw the field missing, and wrote it again at every reconcile, each triggered by the watch event
//! of its own write: a loop of status writes (seven a second in the 200-node benchmark run with an older CRD).
//! Helm, for one, never upgrades the CRDs of a chart, so an older CRD under a newer controller is common.
//!
//! So each write's answer is compared with what was written. When fields were dropped or changed, the controller
//! says so once (a Warning Event `StatusFieldsDropped` naming them, and a log line), and does not write the same
//! status again onto the object its write produced: only a change of the object (another resourceVersion) or of the
//! computed status writes again. The rollout goes on; what the dropped fields record (the image a rollback would go
//! back to, say) is missing until the CRD is updated.

use parking_lot::Mutex;
use serde_json::Value;
use shared::crd::{NodeVersion, NodeVersionStatus};
use std::collections::HashMap;

/// The last write of each NodeVersion's status (by name) that the API server answered with fields dropped.
#[derive(Default)]
pub struct Dropped {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    last: HashMap<String, Entry>,
    /// The fields last said dropped, by NodeVersion: each set is said once, not again after a write the server
    /// answered in full (one without those fields).
    said: HashMap<String, Vec<String>>,
}

struct Entry {
    /// The status written.
    written: NodeVersionStatus,
    /// The resourceVersion of the object the server answered.
    answered: Option<String>,
}

impl Dropped {
    /// Whether writing `status` onto `version` would only repeat a write the server answered with `version` itself,
    /// dropping fields: the same status, and the object unchanged since.
    pub fn repeats(&self, name: &str, resource_version: Option<&str>, status: &NodeVersionStatus) -> bool {
        let inner = self.inner.lock();
        inner.last.get(name).is_some_and(|e| e.answered.as_deref() == resource_version && &e.written == status)
    }

    /// Records the answer to a write of `written`. Returns the fields the server dropped or changed when they are
    /// not the ones last said for this NodeVersion (so that each set is said once), else `None`.
    pub fn record(&self, name: &str, written: &NodeVersionStatus, answer: &NodeVersion) -> Option<Vec<String>> {
        let mut inner = self.inner.lock();
        if answer.status.as_ref() == Some(written) {
            inner.last.remove(name);
            return None;
        }
        let sent = serde_json::to_value(written).unwrap_or(Value::Null);
        let got = serde_json::to_value(&answer.status).unwrap_or(Value::Null);
        let mut fields = Vec::new();
        differences("status", &sent, &got, &mut fields);
        if fields.is_empty() {
            // Equal as JSON (a field's empty value and its absence, say): nothing was lost.
            inner.last.remove(name);
            return None;
        }
        let new = inner.said.get(name) != Some(&fields);
        if new {
            inner.said.insert(name.to_owned(), fields.clone());
        }
        let entry = Entry { written: written.clone(), answered: answer.metadata.resource_version.clone() };
        inner.last.insert(name.to_owned(), entry);
        new.then_some(fields)
    }

    /// Forgets the NodeVersions `keep` does not keep.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        let mut inner = self.inner.lock();
        inner.last.retain(|name, _| keep(name));
        inner.said.retain(|name, _| keep(name));
    }
}

/// The paths (`status.rollback.since`) where `got` lacks or differs from what `sent` has. Lists are compared whole.
fn differences(path: &str, sent: &Value, got: &Value, out: &mut Vec<String>) {
    match (sent, got) {
        (Value::Object(sent), Value::Object(got)) => {
            for (key, value) in sent {
                let path = format!("{path}.{key}");
                match got.get(key) {
                    Some(other) => differences(&path, value, other, out),
                    None if value.is_null() => {}
                    None => out.push(path),
                }
            }
        }
        (sent, got) if sent != got => out.push(path.to_owned()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn answer(status: NodeVersionStatus, rv: &str) -> NodeVersion {
        let mut version = NodeVersion::new("v", Default::default());
        version.metadata =
            ObjectMeta { name: Some("v".into()), resource_version: Some(rv.into()), ..Default::default() };
        version.status = Some(status);
        version
    }

    fn status(last_complete: Option<&str>) -> NodeVersionStatus {
        NodeVersionStatus { last_complete_image: last_complete.map(str::to_owned), ..Default::default() }
    }

    #[test]
    fn a_dropped_field_is_named_once_and_the_same_write_onto_its_answer_is_a_repeat() {
        let dropped = Dropped::default();
        let written = status(Some("v2"));
        assert_eq!(
            dropped.record("v", &written, &answer(status(None), "7")),
            Some(vec!["status.lastCompleteImage".into()])
        );
        assert!(dropped.repeats("v", Some("7"), &written));
        // The object changed since (another writer, or the watch's newer object): written again.
        assert!(!dropped.repeats("v", Some("8"), &written));
        // Another status: written.
        assert!(!dropped.repeats("v", Some("7"), &status(Some("v3"))));
        // The same fields dropped again: not said again.
        assert_eq!(dropped.record("v", &written, &answer(status(None), "9")), None);
        assert!(dropped.repeats("v", Some("9"), &written));
    }

    #[test]
    fn a_write_answered_in_full_writes_again_and_the_same_drop_is_not_said_again() {
        let dropped = Dropped::default();
        let written = status(Some("v2"));
        dropped.record("v", &written, &answer(status(None), "7"));
        assert_eq!(dropped.record("v", &written, &answer(written.clone(), "8")), None);
        assert!(!dropped.repeats("v", Some("8"), &written));
        // Dropped again later (a status without the field written in between): not said again.
        assert_eq!(dropped.record("v", &written, &answer(status(None), "9")), None);
        assert!(dropped.repeats("v", Some("9"), &written));
    }

    #[test]
    fn nested_and_changed_fields_are_named_by_path() {
        let mut out = Vec::new();
        let sent = serde_json::json!({"a": 1, "b": {"c": "x", "d": "y", "n": null}, "l": [1, 2]});
        let got = serde_json::json!({"a": 2, "b": {"c": "x"}, "l": [1]});
        differences("status", &sent, &got, &mut out);
        assert_eq!(out, vec!["status.a", "status.b.d", "status.l"]);
        let retained = Dropped::default();
        retained.record("v", &status(Some("v2")), &answer(status(None), "1"));
        retained.retain(|name| name != "v");
        assert!(!retained.repeats("v", Some("1"), &status(Some("v2"))));
    }
}
