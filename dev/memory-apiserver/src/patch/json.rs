//! JSON patch (RFC 6902) with the semantics of evanphx/json-patch, which kube-apiserver uses.
//!
//! # Guarantees
//! - `test` of a missing member against `null` succeeds (kube-runtime's finalizer helper depends on it; the
//!   `json-patch` crate gets this wrong).
//! - A body that is not a list of operations is [`JsonPatchError::Malformed`] (400 upstream); an operation
//!   that does not apply is [`JsonPatchError::Failed`] (422 upstream) with evanphx's message.
//! - The document is only replaced when every operation applied.

use serde_json::Value;

/// More operations than this are refused, as upstream does (413).
pub const MAX_OPERATIONS: usize = 10_000;

/// Why a JSON patch was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JsonPatchError {
    /// The body is not a JSON patch document.
    #[error("{0}")]
    Malformed(String),
    /// More than [`MAX_OPERATIONS`] operations.
    #[error("The allowed maximum operations in a JSON patch is {MAX_OPERATIONS}, got {0}")]
    TooManyOperations(usize),
    /// An operation did not apply (failed `test`, missing path ...).
    #[error("{0}")]
    Failed(String),
}

/// Applies a JSON patch document (`patch`, an array of operations) to `target`.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), JsonPatchError> {
    let operations = patch.as_array().ok_or_else(|| {
        JsonPatchError::Malformed("json: cannot unmarshal object into Go value of type jsonpatch.Patch".into())
    })?;
    if operations.len() > MAX_OPERATIONS {
        return Err(JsonPatchError::TooManyOperations(operations.len()));
    }
    let mut document = target.clone();
    for operation in operations {
        apply_operation(&mut document, operation)?;
    }
    *target = document;
    Ok(())
}

fn apply_operation(document: &mut Value, operation: &Value) -> Result<(), JsonPatchError> {
    let op = operation.get("op").and_then(Value::as_str).unwrap_or_default();
    let path = operation
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| JsonPatchError::Failed(format!("{op} operation missing path")))?;
    let pointer = parse_pointer(path)?;
    let value = operation.get("value");
    let missing = |what: &str| {
        JsonPatchError::Failed(format!(
            "{what} operation does not apply: doc is missing path: \"{path}\": missing value"
        ))
    };
    match op {
        "add" => {
            let value = value.ok_or_else(|| JsonPatchError::Failed("add operation missing value".into()))?;
            add(document, &pointer, value.clone()).ok_or_else(|| missing("add"))
        }
        "remove" => remove(document, &pointer).map(drop).ok_or_else(|| missing("remove")),
        "replace" => {
            let value = value.ok_or_else(|| JsonPatchError::Failed("replace operation missing value".into()))?;
            let slot = get_mut(document, &pointer).ok_or_else(|| {
                JsonPatchError::Failed(format!(
                    "replace operation does not apply: doc is missing key: {path}: missing value"
                ))
            })?;
            *slot = value.clone();
            Ok(())
        }
        "move" | "copy" => {
            let from = operation
                .get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| JsonPatchError::Failed(format!("{op} operation missing from")))?;
            let from_pointer = parse_pointer(from)?;
            let moved = if op == "move" {
                if pointer.starts_with(&from_pointer) && pointer.len() > from_pointer.len() {
                    return Err(JsonPatchError::Failed(format!(
                        "move operation does not apply: cannot move {from} into its child {path}"
                    )));
                }
                remove(document, &from_pointer)
            } else {
                get(document, &from_pointer).cloned()
            }
            .ok_or_else(|| {
                JsonPatchError::Failed(format!(
                    "{op} operation does not apply: doc is missing from path: {from}: missing value"
                ))
            })?;
            add(document, &pointer, moved).ok_or_else(|| missing(op))
        }
        "test" => test(document, &pointer, path, value),
        other => Err(JsonPatchError::Failed(format!("Unexpected kind: {other}"))),
    }
}

/// evanphx `test`: the parent must exist; a missing member equals `null`.
fn test(document: &Value, pointer: &[String], path: &str, expected: Option<&Value>) -> Result<(), JsonPatchError> {
    let failed = || JsonPatchError::Failed(format!("testing value {path} failed: test failed"));
    let Some((last, parent)) = pointer.split_last() else {
        return if Some(document) == expected { Ok(()) } else { Err(failed()) };
    };
    let container = get(document, parent)
        .filter(|c| c.is_object() || c.is_array())
        .ok_or_else(|| JsonPatchError::Failed(format!("test operation does not apply: is missing path: {path}")))?;
    let actual = match container {
        Value::Object(fields) => fields.get(last),
        Value::Array(items) => index(last, items.len()).and_then(|i| items.get(i)),
        _ => None,
    };
    let expected = expected.filter(|v| !v.is_null());
    match (actual.filter(|v| !v.is_null()), expected) {
        (None, None) => Ok(()),
        (Some(a), Some(e)) if a == e => Ok(()),
        _ => Err(failed()),
    }
}

/// Splits a JSON pointer into unescaped reference tokens.
fn parse_pointer(path: &str) -> Result<Vec<String>, JsonPatchError> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let rest =
        path.strip_prefix('/').ok_or_else(|| JsonPatchError::Failed(format!("invalid JSON pointer: {path:?}")))?;
    Ok(rest.split('/').map(|token| token.replace("~1", "/").replace("~0", "~")).collect())
}

fn index(token: &str, len: usize) -> Option<usize> {
    if token.is_empty() || (token.len() > 1 && token.starts_with('0')) || !token.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    token.parse::<usize>().ok().filter(|i| *i < len)
}

fn get<'a>(document: &'a Value, pointer: &[String]) -> Option<&'a Value> {
    pointer.iter().try_fold(document, |value, token| match value {
        Value::Object(fields) => fields.get(token),
        Value::Array(items) => index(token, items.len()).and_then(|i| items.get(i)),
        _ => None,
    })
}

fn get_mut<'a>(document: &'a mut Value, pointer: &[String]) -> Option<&'a mut Value> {
    pointer.iter().try_fold(document, |value, token| match value {
        Value::Object(fields) => fields.get_mut(token),
        Value::Array(items) => {
            let len = items.len();
            index(token, len).and_then(move |i| items.get_mut(i))
        }
        _ => None,
    })
}

fn add(document: &mut Value, pointer: &[String], value: Value) -> Option<()> {
    let Some((last, parent)) = pointer.split_last() else {
        *document = value;
        return Some(());
    };
    match get_mut(document, parent)? {
        Value::Object(fields) => {
            fields.insert(last.clone(), value);
            Some(())
        }
        Value::Array(items) => {
            let at =
                if last == "-" || last == &items.len().to_string() { items.len() } else { index(last, items.len())? };
            items.insert(at, value);
            Some(())
        }
        _ => None,
    }
}

fn remove(document: &mut Value, pointer: &[String]) -> Option<Value> {
    let (last, parent) = pointer.split_last()?;
    match get_mut(document, parent)? {
        Value::Object(fields) => fields.remove(last),
        Value::Array(items) => {
            let at = index(last, items.len())?;
            Some(items.remove(at))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patched(mut document: Value, patch: Value) -> Result<Value, JsonPatchError> {
        json_patch(&mut document, &patch).map(|()| document)
    }

    #[test]
    fn testing_a_missing_member_against_null_succeeds() {
        let pod = json!({"metadata": {"name": "p"}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": []},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "f"}
        ]);
        assert_eq!(patched(pod, patch).unwrap(), json!({"metadata": {"name": "p", "finalizers": ["f"]}}));
    }

    #[test]
    fn a_failed_test_is_a_failure_with_the_evanphx_message() {
        let pod = json!({"metadata": {"finalizers": ["a"]}});
        let error = patched(pod, json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "b"}])).unwrap_err();
        assert_eq!(error, JsonPatchError::Failed("testing value /metadata/finalizers/0 failed: test failed".into()));
        let error = patched(json!({}), json!([{"op": "test", "path": "/a/b", "value": null}])).unwrap_err();
        assert!(matches!(error, JsonPatchError::Failed(_)));
        let error = patched(json!({"a": 1}), json!([{"op": "test", "path": "/a", "value": null}])).unwrap_err();
        assert!(matches!(error, JsonPatchError::Failed(_)));
    }

    #[test]
    fn every_operation_applies_as_rfc6902_says() {
        let doc = json!({"a": {"b": [1, 2, 3]}, "c": "x"});
        let patch = json!([
            {"op": "replace", "path": "/c", "value": "y"},
            {"op": "remove", "path": "/a/b/0"},
            {"op": "add", "path": "/a/b/1", "value": 9},
            {"op": "copy", "from": "/c", "path": "/d"},
            {"op": "move", "from": "/a/b", "path": "/e"},
            {"op": "add", "path": "/f~1g", "value": {"~": 1}},
            {"op": "test", "path": "/f~1g/~0", "value": 1}
        ]);
        assert_eq!(patched(doc, patch).unwrap(), json!({"a": {}, "c": "y", "d": "y", "e": [2, 9, 3], "f/g": {"~": 1}}));
    }

    #[test]
    fn missing_paths_fail_and_leave_the_document_alone() {
        let mut doc = json!({"a": 1});
        let before = doc.clone();
        for patch in [
            json!([{"op": "add", "path": "/x", "value": 1}, {"op": "remove", "path": "/nope"}]),
            json!([{"op": "replace", "path": "/nope", "value": 1}]),
            json!([{"op": "add", "path": "/a/b/c", "value": 1}]),
            json!([{"op": "move", "from": "/nope", "path": "/b"}]),
            json!([{"op": "frobnicate", "path": "/a"}]),
            json!([{"op": "add", "path": "a", "value": 1}]),
        ] {
            assert!(matches!(json_patch(&mut doc, &patch), Err(JsonPatchError::Failed(_))), "{patch}");
            assert_eq!(doc, before);
        }
        assert!(matches!(json_patch(&mut doc, &json!({"op": "add"})), Err(JsonPatchError::Malformed(_))));
    }

    #[test]
    fn array_indices_are_strict() {
        assert!(patched(json!({"a": [1]}), json!([{"op": "remove", "path": "/a/01"}])).is_err());
        assert!(patched(json!({"a": [1]}), json!([{"op": "add", "path": "/a/5", "value": 1}])).is_err());
        assert_eq!(
            patched(json!({"a": [1]}), json!([{"op": "add", "path": "/a/1", "value": 2}])).unwrap(),
            json!({"a": [1, 2]})
        );
    }
}
