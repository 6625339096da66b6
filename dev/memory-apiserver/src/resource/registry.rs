//! The set of served resource types: the built-ins plus the kinds of every established CRD.

use super::{Gvr, ResourceType, builtin_types};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The served resource types, by (group, version, plural).
#[derive(Debug, Clone)]
pub struct Registry {
    types: BTreeMap<Gvr, Arc<ResourceType>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// The built-in types only.
    pub fn new() -> Self {
        let types =
            builtin_types().into_iter().map(|t| (Gvr::new(&t.group, &t.version, &t.plural), Arc::new(t))).collect();
        Registry { types }
    }

    /// The type served at `gvr`.
    pub fn get(&self, gvr: &Gvr) -> Option<Arc<ResourceType>> {
        self.types.get(gvr).cloned()
    }

    /// The type of `kind` in `api_version` (`apps/v1`, `v1`).
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.types.values().find(|t| t.group == group && t.version == version && t.kind == kind).cloned()
    }

    /// Every served type, ordered by group, version and plural.
    pub fn types(&self) -> impl Iterator<Item = &Arc<ResourceType>> {
        self.types.values()
    }

    /// Every type of one (group, version).
    pub fn types_of(&self, group: &str, version: &str) -> Vec<Arc<ResourceType>> {
        self.types.values().filter(|t| t.group == group && t.version == version).cloned().collect()
    }

    /// Groups and their versions, in discovery order: the built-in groups first, in the order upstream lists
    /// them, then CRD groups alphabetically.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for t in self.types.values().filter(|t| !t.group.is_empty()) {
            match groups.iter_mut().find(|(g, _)| *g == t.group) {
                Some((_, versions)) if !versions.contains(&t.version) => versions.push(t.version.clone()),
                Some(_) => {}
                None => groups.push((t.group.clone(), vec![t.version.clone()])),
            }
        }
        let rank = |group: &str| {
            [
                "apps",
                "events.k8s.io",
                "authentication.k8s.io",
                "authorization.k8s.io",
                "policy",
                "rbac.authorization.k8s.io",
                "admissionregistration.k8s.io",
                "coordination.k8s.io",
                "apiextensions.k8s.io",
            ]
            .iter()
            .position(|g| *g == group)
            .unwrap_or(usize::MAX)
        };
        groups.sort_by(|a, b| rank(&a.0).cmp(&rank(&b.0)).then_with(|| a.0.cmp(&b.0)));
        groups
    }

    /// Replaces the types a CRD serves.
    pub fn set_crd_types(&mut self, crd_name: &str, types: Vec<ResourceType>) {
        self.remove_crd(crd_name);
        for t in types {
            self.types.insert(Gvr::new(&t.group, &t.version, &t.plural), Arc::new(t));
        }
    }

    /// Stops serving a CRD's types.
    pub fn remove_crd(&mut self, crd_name: &str) {
        self.types.retain(|_, t| t.custom().is_none_or(|c| c.crd_name != crd_name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_ins_are_found_by_resource_and_by_kind() {
        let registry = Registry::new();
        assert_eq!(registry.get(&Gvr::new("", "v1", "pods")).unwrap().kind, "Pod");
        assert_eq!(registry.by_kind("policy/v1", "PodDisruptionBudget").unwrap().plural, "poddisruptionbudgets");
        assert!(registry.get(&Gvr::new("", "v1", "widgets")).is_none());
        assert_eq!(registry.groups()[0].0, "apps");
    }
}
