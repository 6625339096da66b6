//! Request metrics: how many requests of each verb, resource, subresource and User-Agent the server answered.
//!
//! Verbs are named as Kubernetes audit logs name them: `get`, `list`, `watch`, `create`, `update`, `patch`,
//! `delete`, `deletecollection`. In-process writers are counted under their identity as the User-Agent.

use parking_lot::Mutex;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A request verb, as audit logs name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// GET of one object (or subresource).
    Get,
    /// GET of a collection.
    List,
    /// GET with `watch=true`.
    Watch,
    /// POST (also eviction and binding).
    Create,
    /// PUT.
    Update,
    /// PATCH.
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    #[serde(rename = "deletecollection")]
    DeleteCollection,
}

impl Verb {
    /// The audit name.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }

    /// The verb of an audit name.
    pub fn parse(name: &str) -> Option<Verb> {
        [
            Verb::Get,
            Verb::List,
            Verb::Watch,
            Verb::Create,
            Verb::Update,
            Verb::Patch,
            Verb::Delete,
            Verb::DeleteCollection,
        ]
        .into_iter()
        .find(|v| v.as_str() == name)
    }

    /// True for verbs that change objects.
    pub fn is_write(self) -> bool {
        matches!(self, Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection)
    }
}

/// What one counter counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct RequestKey {
    /// The verb.
    pub verb: Verb,
    /// API group of the resource (empty for core).
    pub group: String,
    /// Plural resource (`nodes`); empty for non-resource URLs.
    pub resource: String,
    /// Subresource (`status`, `eviction`), empty for none.
    pub subresource: String,
    /// The User-Agent header, or the in-process writer's identity.
    pub user_agent: String,
}

/// One counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestCount {
    /// What is counted.
    #[serde(flatten)]
    pub key: RequestKey,
    /// How many requests.
    pub count: u64,
}

/// The request counters of one server (cloneable handle).
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    counts: Arc<Mutex<HashMap<RequestKey, u64>>>,
}

impl Metrics {
    /// Counts one request.
    pub fn record(&self, verb: Verb, group: &str, resource: &str, subresource: &str, user_agent: &str) {
        let key = RequestKey {
            verb,
            group: group.to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            user_agent: user_agent.to_owned(),
        };
        *self.counts.lock().entry(key).or_default() += 1;
    }

    /// Every counter, sorted.
    pub fn snapshot(&self) -> Vec<RequestCount> {
        let mut counts: Vec<RequestCount> =
            self.counts.lock().iter().map(|(key, count)| RequestCount { key: key.clone(), count: *count }).collect();
        counts.sort_by(|a, b| a.key.cmp(&b.key));
        counts
    }

    /// The sum of the counters `filter` accepts.
    pub fn count(&self, filter: impl Fn(&RequestKey) -> bool) -> u64 {
        self.counts.lock().iter().filter(|(key, _)| filter(key)).map(|(_, count)| *count).sum()
    }

    /// The counters `filter` accepts, summed per `group` of their key.
    pub fn sum_by<G: Ord>(
        &self,
        filter: impl Fn(&RequestKey) -> bool,
        group: impl Fn(&RequestKey) -> G,
    ) -> BTreeMap<G, u64> {
        let mut sums = BTreeMap::new();
        for (key, count) in self.counts.lock().iter().filter(|(key, _)| filter(key)) {
            *sums.entry(group(key)).or_default() += count;
        }
        sums
    }

    /// Requests per verb.
    pub fn by_verb(&self) -> BTreeMap<Verb, u64> {
        self.sum_by(|_| true, |key| key.verb)
    }

    /// Writes (create, update, patch, delete, deletecollection) of `resource`, per User-Agent.
    pub fn writes_by_user_agent(&self, resource: &str) -> BTreeMap<String, u64> {
        self.sum_by(|key| key.resource == resource && key.verb.is_write(), |key| key.user_agent.clone())
    }

    /// Forgets every counter.
    pub fn reset(&self) {
        self.counts.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_group_by_verb_and_user_agent() {
        let metrics = Metrics::default();
        metrics.record(Verb::Patch, "", "nodes", "", "update-operator/agent 0.1.0");
        metrics.record(Verb::Patch, "", "nodes", "", "update-operator/agent 0.1.0");
        metrics.record(Verb::Patch, "", "nodes", "status", "update-operator/controller 0.1.0");
        metrics.record(Verb::Get, "", "nodes", "", "update-operator/controller 0.1.0");
        let writes = metrics.writes_by_user_agent("nodes");
        assert_eq!(writes["update-operator/agent 0.1.0"], 2);
        assert_eq!(writes["update-operator/controller 0.1.0"], 1);
        assert_eq!(metrics.by_verb()[&Verb::Patch], 3);
        assert_eq!(metrics.count(|k| k.subresource == "status"), 1);
        assert_eq!(Verb::parse("deletecollection"), Some(Verb::DeleteCollection));
        metrics.reset();
        assert!(metrics.snapshot().is_empty());
    }
}
