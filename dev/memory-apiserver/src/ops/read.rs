//! GET and LIST: one object, or one page of a consistent snapshot.
//!
//! # Guarantees
//! - Every page of a paginated list comes from the snapshot of the first page and reports its resourceVersion;
//!   items are in key order (`namespace/name`, as etcd orders them).
//! - A continue token whose snapshot is gone gives 410 Expired; `resourceVersion` with `continue` gives 400.
//! - A list at a future resourceVersion waits for the store to catch up, then answers 504 with cause
//!   `ResourceVersionTooLarge`, as upstream does.
//! - A page followed by more carries `remainingItemCount` (the objects of the snapshot after it, in the namespace
//!   asked for) when the count is exact: only without label and field selectors, as upstream sets it.

use super::continue_token;
use crate::core::Core;
use crate::error::ApiError;
use crate::object::{Filter, ObjectKey, StoredObject, object_key};
use crate::resource::ResourceType;
use crate::schema::ErrorKind;
use crate::selector::FieldRef;
use crate::state::{Objects, State};
use std::ops::Bound;
use std::sync::Arc;

/// What a list asks for.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// Namespace, label and field constraints.
    pub filter: Filter,
    /// Page size.
    pub limit: Option<usize>,
    /// `continue` token of the previous page.
    pub continue_token: Option<String>,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<String>,
}

/// One page.
#[derive(Debug, Clone)]
pub struct ListResult {
    /// The snapshot's resourceVersion.
    pub rv: u64,
    /// The matching objects of this page.
    pub items: Vec<Arc<StoredObject>>,
    /// Token of the next page, if there is one.
    pub continue_token: Option<String>,
    /// How many objects follow this page (`metadata.remainingItemCount`), when that is known exactly.
    pub remaining: Option<u64>,
}

enum ListFailure {
    Api(ApiError),
    Future(u64),
}

impl From<ApiError> for ListFailure {
    fn from(error: ApiError) -> Self {
        ListFailure::Api(error)
    }
}

fn invalid_list_options(field: &str, kind: ErrorKind, message: &str) -> ApiError {
    let error = crate::schema::field_error(field, kind, message);
    ApiError::invalid_named("ListOptions.meta.k8s.io", "meta.k8s.io", "ListOptions", "", &[error])
}

impl Core {
    /// The current version of one object; 404 when missing.
    pub fn get(&self, rt: &ResourceType, namespace: Option<&str>, name: &str) -> Result<Arc<StoredObject>, ApiError> {
        self.state.lock().get(rt, &object_key(namespace, name)).ok_or_else(|| ApiError::not_found(rt, name))
    }

    /// One page of a list, waiting (up to `future_rv_wait`) when it asks for a resourceVersion the store has
    /// not reached yet.
    pub async fn list(&self, rt: &ResourceType, options: &ListOptions) -> Result<ListResult, ApiError> {
        match self.list_now(rt, options) {
            Ok(result) => Ok(result),
            Err(ListFailure::Api(error)) => Err(error),
            Err(ListFailure::Future(wanted)) => {
                let mut changes = self.rv_changes.clone();
                let reached =
                    tokio::time::timeout(self.config.future_rv_wait, changes.wait_for(|rv| *rv >= wanted)).await;
                if matches!(reached, Ok(Ok(_))) {
                    return match self.list_now(rt, options) {
                        Ok(result) => Ok(result),
                        Err(ListFailure::Api(error)) => Err(error),
                        Err(ListFailure::Future(_)) => Err(too_large(wanted, self.state.lock().rv)),
                    };
                }
                Err(too_large(wanted, self.state.lock().rv))
            }
        }
    }

    /// One page of a list without waiting: a future resourceVersion is a 504 at once.
    pub fn list_sync(&self, rt: &ResourceType, options: &ListOptions) -> Result<ListResult, ApiError> {
        self.list_now(rt, options).map_err(|failure| match failure {
            ListFailure::Api(error) => error,
            ListFailure::Future(wanted) => too_large(wanted, self.state.lock().rv),
        })
    }

    fn list_now(&self, rt: &ResourceType, options: &ListOptions) -> Result<ListResult, ListFailure> {
        let rv_param = options.resource_version.as_deref().filter(|rv| !rv.is_empty());
        let (objects, rv, start) = match &options.continue_token {
            Some(token) if !token.is_empty() => {
                if rv_param.is_some() {
                    return Err(ApiError::bad_request(
                        "specifying resource version is not allowed when using continue",
                    )
                    .into());
                }
                let (rv, start) = continue_token::decode(token).map_err(ApiError::bad_request)?;
                let objects = self.state.lock().snapshots.get(&rt.store_id, rv).ok_or_else(|| {
                    ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
                })?;
                (objects, rv, Some(start))
            }
            _ => {
                let exact = match options.resource_version_match.as_deref() {
                    None | Some("") => false,
                    Some(_) if rv_param.is_none() => {
                        return Err(invalid_list_options(
                            "resourceVersionMatch",
                            ErrorKind::Forbidden,
                            "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                        )
                        .into());
                    }
                    Some("NotOlderThan") => false,
                    Some("Exact") if rv_param == Some("0") => {
                        return Err(invalid_list_options(
                            "resourceVersionMatch",
                            ErrorKind::Forbidden,
                            "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                        )
                        .into());
                    }
                    Some("Exact") => true,
                    Some(other) => {
                        return Err(invalid_list_options(
                            "resourceVersionMatch",
                            ErrorKind::NotSupported,
                            &format!(
                                "Unsupported value: \"{other}\": supported values: \"Exact\", \"NotOlderThan\", \"\""
                            ),
                        )
                        .into());
                    }
                };
                let wanted = match rv_param {
                    None => None,
                    Some(text) => Some(text.parse::<u64>().map_err(|_| {
                        ApiError::bad_request(format!("invalid resourceVersion {text:?}: must be an integer"))
                    })?),
                };
                let mut state = self.state.lock();
                match wanted {
                    Some(wanted) if wanted > state.rv => return Err(ListFailure::Future(wanted)),
                    Some(wanted) if exact && wanted != 0 && wanted != state.rv => {
                        let objects = state.snapshots.get(&rt.store_id, wanted).ok_or_else(|| {
                            ApiError::expired(format!("too old resource version: {wanted} ({})", state.rv))
                        })?;
                        (objects, wanted, None)
                    }
                    _ => {
                        if let Some(page) = on_one_node(&state, rt, options) {
                            return Ok(page);
                        }
                        (state.objects(rt), state.rv, None)
                    }
                }
            }
        };
        let (items, more) = page(&objects, &options.filter, start.as_deref(), options.limit);
        let remaining = match &more {
            Some(last) if options.filter.labels.is_empty() && options.filter.fields.requirements.is_empty() => {
                Some(count_after(&objects, &options.filter, last))
            }
            _ => None,
        };
        let continue_token = more.map(|last| {
            self.state.lock().snapshots.insert(&rt.store_id, rv, objects.clone());
            continue_token::encode(rv, &last)
        });
        Ok(ListResult { rv, items, continue_token, remaining })
    }
}

/// A list pinned to one node (`spec.nodeName=X`, what per-node agents ask) read from the node index instead of
/// a scan of every pod; `None` when the index does not apply or the result needs more than one page.
fn on_one_node(state: &State, rt: &ResourceType, options: &ListOptions) -> Option<ListResult> {
    let field = rt.node_name_field()?;
    let node = options.filter.fields.pinned(FieldRef::Custom(field))?;
    let items: Vec<Arc<StoredObject>> = state
        .objects_on_node(rt, node)?
        .into_iter()
        .filter(|(_, object)| options.filter.matches(&object.index))
        .map(|(_, object)| object)
        .collect();
    if options.limit.is_some_and(|limit| limit > 0 && items.len() > limit) {
        return None;
    }
    Some(ListResult { rv: state.rv, items, continue_token: None, remaining: None })
}

fn too_large(wanted: u64, current: u64) -> ApiError {
    ApiError::timeout(format!("Too large resource version: {wanted}, current: {current}"))
        .with_cause("ResourceVersionTooLarge", "Too large resource version", None)
        .with_retry_after(1)
}

/// How many objects of the filter's namespace (all of them without one) sort after `last`.
fn count_after(objects: &Objects, filter: &Filter, last: &str) -> u64 {
    let end = filter.namespace.as_ref().map(|ns| format!("{ns}0"));
    let upper = match end.as_deref() {
        Some(end) => Bound::Excluded(end),
        None => Bound::Unbounded,
    };
    objects.range::<str, _>((Bound::Excluded(last), upper)).count() as u64
}

/// The matching objects from `start` on, at most `limit`; plus the last key when more matches follow.
fn page(
    objects: &Objects,
    filter: &Filter,
    start: Option<&str>,
    limit: Option<usize>,
) -> (Vec<Arc<StoredObject>>, Option<String>) {
    let prefix = filter.namespace.as_ref().map(|ns| format!("{ns}/"));
    // '0' follows '/' in byte order: every "ns/..." key sorts below "ns0".
    let end = filter.namespace.as_ref().map(|ns| format!("{ns}0"));
    let lower = match (start, prefix.as_deref()) {
        (Some(start), Some(prefix)) if start < prefix => Bound::Included(prefix),
        (Some(start), _) => Bound::Included(start),
        (None, Some(prefix)) => Bound::Included(prefix),
        (None, None) => Bound::Unbounded,
    };
    let upper = match end.as_deref() {
        Some(end) => Bound::Excluded(end),
        None => Bound::Unbounded,
    };
    let limit = limit.filter(|l| *l > 0);
    let mut items = Vec::new();
    let mut last: Option<&ObjectKey> = None;
    for (key, object) in objects.range::<str, _>((lower, upper)) {
        if !filter.matches(&object.index) {
            continue;
        }
        if limit.is_some_and(|l| items.len() >= l) {
            return (items, last.map(|k| k.to_string()));
        }
        items.push(object.clone());
        last = Some(key);
    }
    (items, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::builtin_types;
    use serde_json::json;

    fn objects(names: &[(&str, &str)]) -> (ResourceType, Objects) {
        let pods = builtin_types().into_iter().find(|t| t.plural == "pods").unwrap();
        let mut map = Objects::new_sync();
        for (i, (ns, name)) in names.iter().enumerate() {
            let pod = json!({"metadata": {"name": name, "namespace": ns, "labels": {"i": (i % 2).to_string()}}});
            map.insert_mut(object_key(Some(ns), name), StoredObject::new(&pods, &pod, 1));
        }
        (pods, map)
    }

    fn names(items: &[Arc<StoredObject>]) -> Vec<String> {
        items.iter().map(|o| format!("{}/{}", o.index.namespace, o.index.name)).collect()
    }

    #[test]
    fn pages_follow_key_order_and_stop_at_the_last_match() {
        let (_, map) = objects(&[("b", "1"), ("a", "2"), ("a", "1"), ("a-b", "x"), ("c", "1")]);
        let filter = Filter::default();
        let (first, more) = page(&map, &filter, None, Some(2));
        assert_eq!(names(&first), vec!["a-b/x", "a/1"]);
        let start = format!("{}\u{0}", more.unwrap());
        let (second, more) = page(&map, &filter, Some(&start), Some(2));
        assert_eq!(names(&second), vec!["a/2", "b/1"]);
        let start = format!("{}\u{0}", more.unwrap());
        let (third, more) = page(&map, &filter, Some(&start), Some(2));
        assert_eq!(names(&third), vec!["c/1"]);
        assert!(more.is_none());
    }

    #[test]
    fn the_rest_of_a_namespace_is_counted_after_a_page() {
        let (_, map) = objects(&[("a", "1"), ("a", "2"), ("a", "3"), ("b", "1")]);
        let in_a = Filter { namespace: Some("a".into()), ..Default::default() };
        let (items, more) = page(&map, &in_a, None, Some(1));
        assert_eq!(names(&items), vec!["a/1"]);
        assert_eq!(count_after(&map, &in_a, &more.unwrap()), 2, "b/1 is in another namespace");
        assert_eq!(count_after(&map, &Filter::default(), "a/1"), 3);
    }

    #[test]
    fn a_namespace_is_a_key_range() {
        let (_, map) = objects(&[("a", "1"), ("a-b", "x"), ("a", "2"), ("ab", "y")]);
        let filter = Filter { namespace: Some("a".into()), ..Default::default() };
        let (items, more) = page(&map, &filter, None, None);
        assert_eq!(names(&items), vec!["a/1", "a/2"]);
        assert!(more.is_none());
    }

    #[test]
    fn no_continue_is_given_when_nothing_else_matches() {
        let (_, map) = objects(&[("a", "1"), ("a", "2"), ("a", "3")]);
        let filter = Filter { labels: crate::selector::LabelSelector::parse("i=0").unwrap(), ..Default::default() };
        let (items, more) = page(&map, &filter, None, Some(2));
        assert_eq!(names(&items), vec!["a/1", "a/3"]);
        assert!(more.is_none());
    }
}
