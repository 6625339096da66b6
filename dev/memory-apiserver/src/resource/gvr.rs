//! [`Gvr`]: how requests and the store name a served resource.

/// The identity of a served resource in requests: group, version and plural.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvr {
    /// API group (empty for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural resource name.
    pub plural: String,
}

impl Gvr {
    /// A (group, version, plural).
    pub fn new(group: &str, version: &str, plural: &str) -> Self {
        Gvr { group: group.to_owned(), version: version.to_owned(), plural: plural.to_owned() }
    }

    /// The resource of a kube-rs type (`Gvr::of::<Pod>()`).
    pub fn of<K: kube::Resource<DynamicType = ()>>() -> Self {
        Gvr::new(&K::group(&()), &K::version(&()), &K::plural(&()))
    }
}

impl std::fmt::Display for Gvr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}/{}", self.version, self.plural)
        } else {
            write!(f, "{}/{}/{}", self.group, self.version, self.plural)
        }
    }
}
