//! Who makes a request: upstream's `user.Info` (name, uid, groups, extra) and the identities the dev cluster hands
//! out tokens for.

use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Every authenticated user is in this group.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group whose members bypass authorization, as on a real server.
pub const MASTERS: &str = "system:masters";
/// The group of every service account.
pub const SERVICE_ACCOUNTS: &str = "system:serviceaccounts";
/// `user.extra` key of the node a bound service-account token was issued for (kube-apiserver >= 1.32).
pub const EXTRA_NODE_NAME: &str = "authentication.kubernetes.io/node-name";
/// `user.extra` key of that node's uid.
pub const EXTRA_NODE_UID: &str = "authentication.kubernetes.io/node-uid";
/// `user.extra` key of the pod a bound token was issued for.
pub const EXTRA_POD_NAME: &str = "authentication.kubernetes.io/pod-name";
/// `user.extra` key of that pod's uid.
pub const EXTRA_POD_UID: &str = "authentication.kubernetes.io/pod-uid";
/// `user.extra` key of the token's ID (`JTI=<uuid>`).
pub const EXTRA_CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";
/// The name of the dev cluster's administrator (in [`MASTERS`]).
pub const ADMIN: &str = "dev-admin";

/// An authenticated user, as authorization, admission and the reviews see it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    /// `system:serviceaccount:NS:NAME`, or a plain user name.
    pub name: String,
    /// The uid (service accounts: the ServiceAccount's uid).
    pub uid: String,
    /// Groups, `system:authenticated` included.
    pub groups: Vec<String>,
    /// Extra attributes (`authentication.kubernetes.io/node-name` ...), each a list of values.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The dev cluster's administrator: group `system:masters`, which no authorizer or policy restricts.
    pub fn admin() -> UserInfo {
        UserInfo {
            name: ADMIN.to_owned(),
            uid: String::new(),
            groups: vec![MASTERS.to_owned(), AUTHENTICATED.to_owned()],
            extra: BTreeMap::new(),
        }
    }

    /// A service account's user: `system:serviceaccount:NS:NAME` in `system:serviceaccounts`,
    /// `system:serviceaccounts:NS` and `system:authenticated`.
    pub fn service_account(namespace: &str, name: &str, uid: &str) -> UserInfo {
        UserInfo {
            name: service_account_username(namespace, name),
            uid: uid.to_owned(),
            groups: service_account_groups(namespace),
            extra: BTreeMap::new(),
        }
    }

    /// A plain user in `groups` (and `system:authenticated`).
    pub fn user(name: &str, groups: &[&str]) -> UserInfo {
        let mut groups: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
        if !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.to_owned());
        }
        UserInfo { name: name.to_owned(), uid: String::new(), groups, extra: BTreeMap::new() }
    }

    /// True for members of `system:masters`.
    pub fn is_privileged(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS)
    }

    /// The namespace and name of a service-account user.
    pub fn service_account_of(&self) -> Option<(&str, &str)> {
        split_service_account_username(&self.name)
    }

    /// The first value of an extra key.
    pub fn extra_value(&self, key: &str) -> Option<&str> {
        self.extra.get(key).and_then(|values| values.first()).map(String::as_str)
    }

    /// `authentication.k8s.io/v1 UserInfo` as reviews and admission requests carry it (empty fields omitted).
    pub fn to_json(&self) -> Value {
        let mut info = json!({"username": self.name});
        if !self.uid.is_empty() {
            info["uid"] = json!(self.uid);
        }
        if !self.groups.is_empty() {
            info["groups"] = json!(self.groups);
        }
        if !self.extra.is_empty() {
            info["extra"] = json!(self.extra);
        }
        info
    }
}

/// `system:serviceaccount:NS:NAME`.
pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The groups of every service account in `namespace`, as upstream's `MakeGroupNames` plus `system:authenticated`.
pub fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![SERVICE_ACCOUNTS.to_owned(), format!("{SERVICE_ACCOUNTS}:{namespace}"), AUTHENTICATED.to_owned()]
}

/// The namespace and name in `system:serviceaccount:NS:NAME` (both non-empty, no further `:`).
pub fn split_service_account_username(username: &str) -> Option<(&str, &str)> {
    let rest = username.strip_prefix("system:serviceaccount:")?;
    let (namespace, name) = rest.split_once(':')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains(':')).then_some((namespace, name))
}

/// Whom the dev cluster hands a token or kubeconfig to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    /// The administrator ([`UserInfo::admin`]).
    Admin,
    /// A service account; with a node, its token is bound to that Node and carries the node-name and node-uid
    /// extra, as a projected token of a pod on that node does.
    ServiceAccount {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The Node the token is bound to.
        node: Option<String>,
    },
    /// A plain user with groups.
    User {
        /// User name.
        name: String,
        /// Groups (`system:authenticated` is added).
        groups: Vec<String>,
    },
}

/// An identity that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid identity {0:?}: expected admin, serviceaccount:NAMESPACE:NAME[@NODE] or user:NAME[:GROUP[,GROUP...]]")]
pub struct IdentityError(pub String);

impl Identity {
    /// A service account, unbound.
    pub fn service_account(namespace: &str, name: &str) -> Identity {
        Identity::ServiceAccount { namespace: namespace.to_owned(), name: name.to_owned(), node: None }
    }

    /// A service account bound to `node`.
    pub fn service_account_on(namespace: &str, name: &str, node: &str) -> Identity {
        Identity::ServiceAccount { namespace: namespace.to_owned(), name: name.to_owned(), node: Some(node.to_owned()) }
    }

    /// Parses `admin`, `serviceaccount:NS:NAME[@NODE]` or `user:NAME[:GROUP,...]`.
    pub fn parse(text: &str) -> Result<Identity, IdentityError> {
        let error = || IdentityError(text.to_owned());
        if text == "admin" {
            return Ok(Identity::Admin);
        }
        if let Some(rest) = text.strip_prefix("serviceaccount:") {
            let (account, node) = match rest.split_once('@') {
                Some((account, node)) if !node.is_empty() => (account, Some(node.to_owned())),
                Some(_) => return Err(error()),
                None => (rest, None),
            };
            let (namespace, name) = account.split_once(':').ok_or_else(error)?;
            if namespace.is_empty() || name.is_empty() || name.contains(':') {
                return Err(error());
            }
            return Ok(Identity::ServiceAccount { namespace: namespace.to_owned(), name: name.to_owned(), node });
        }
        if let Some(rest) = text.strip_prefix("user:") {
            let (name, groups) = rest.split_once(':').unwrap_or((rest, ""));
            if name.is_empty() {
                return Err(error());
            }
            let groups = groups.split(',').filter(|g| !g.is_empty()).map(str::to_owned).collect();
            return Ok(Identity::User { name: name.to_owned(), groups });
        }
        Err(error())
    }

    /// A short name for file names and listings (`serviceaccount-NS-NAME-NODE`).
    pub fn slug(&self) -> String {
        let text = match self {
            Identity::Admin => "admin".to_owned(),
            Identity::ServiceAccount { namespace, name, node } => match node {
                Some(node) => format!("serviceaccount-{namespace}-{name}-{node}"),
                None => format!("serviceaccount-{namespace}-{name}"),
            },
            Identity::User { name, .. } => format!("user-{name}"),
        };
        text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect()
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Identity::Admin => write!(f, "admin"),
            Identity::ServiceAccount { namespace, name, node: Some(node) } => {
                write!(f, "serviceaccount:{namespace}:{name}@{node}")
            }
            Identity::ServiceAccount { namespace, name, node: None } => write!(f, "serviceaccount:{namespace}:{name}"),
            Identity::User { name, groups } if groups.is_empty() => write!(f, "user:{name}"),
            Identity::User { name, groups } => write!(f, "user:{name}:{}", groups.join(",")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_parse_and_print_back() {
        for text in ["admin", "serviceaccount:ns:sa", "serviceaccount:ns:sa@worker-0", "user:jane:dev,ops", "user:joe"]
        {
            assert_eq!(Identity::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(Identity::parse("user:jane").unwrap(), Identity::User { name: "jane".into(), groups: vec![] });
        for bad in ["", "root", "serviceaccount:ns", "serviceaccount::sa", "serviceaccount:ns:sa@", "user:", "sa:a:b"] {
            assert!(Identity::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn service_account_users_have_upstream_names_and_groups() {
        let user = UserInfo::service_account("kube-system", "default", "u1");
        assert_eq!(user.name, "system:serviceaccount:kube-system:default");
        assert_eq!(
            user.groups,
            ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]
        );
        assert_eq!(user.service_account_of(), Some(("kube-system", "default")));
        assert_eq!(split_service_account_username("system:serviceaccount:a:b:c"), None);
        assert!(!user.is_privileged());
        assert!(UserInfo::admin().is_privileged());
    }
}
