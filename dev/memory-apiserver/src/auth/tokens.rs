//! Bearer tokens: the administrator's, service-account tokens (optionally bound to a Pod or Node, carrying the
//! `authentication.kubernetes.io/*` extra kube-apiserver >= 1.32 sets) and their validation on every request.
//!
//! # Guarantees
//! - A service-account token authenticates only while its ServiceAccount exists with the uid it was issued for, and,
//!   when bound, while the bound object exists with its uid (upstream's bound-token validation); else 401.
//! - An expired token, or one whose audiences exclude the API server's, is 401.
//! - Tokens are opaque random strings (upstream's are JWTs; no client of the dev cluster decodes them).

use super::user::{
    EXTRA_CREDENTIAL_ID, EXTRA_NODE_NAME, EXTRA_NODE_UID, EXTRA_POD_NAME, EXTRA_POD_UID, UserInfo,
    service_account_groups, service_account_username,
};
use base64::Engine;
use parking_lot::RwLock;
use rand::RngCore;
use std::collections::HashMap;

/// The audience of the API server: tokens requested for other audiences do not authenticate to it.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// The object a token is bound to; it authenticates only while that object exists with this uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundObject {
    /// A Pod (namespace, name, uid); `node` is where it ran when the token was issued.
    Pod {
        /// Name.
        name: String,
        /// Uid.
        uid: String,
    },
    /// A Node.
    Node {
        /// Name.
        name: String,
        /// Uid.
        uid: String,
    },
}

/// What a token stands for.
#[derive(Debug, Clone)]
pub struct TokenEntry {
    /// The user it authenticates as.
    pub user: UserInfo,
    /// For service-account tokens: the ServiceAccount's namespace, name and uid.
    pub service_account: Option<(String, String, String)>,
    /// The bound object, if any.
    pub bound: Option<BoundObject>,
    /// When it stops working (`None`: never).
    pub expires: Option<jiff::Timestamp>,
    /// Audiences it was issued for.
    pub audiences: Vec<String>,
}

/// The token table.
#[derive(Debug, Default)]
pub struct Tokens {
    entries: RwLock<HashMap<String, TokenEntry>>,
}

/// A fresh random token.
fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl Tokens {
    /// Stores `entry` under a new token and returns the token.
    pub fn issue(&self, entry: TokenEntry) -> String {
        let token = new_token();
        self.entries.write().insert(token.clone(), entry);
        token
    }

    /// The entry of `token`, if it was issued (validity is checked by the caller against the store).
    pub fn lookup(&self, token: &str) -> Option<TokenEntry> {
        self.entries.read().get(token).cloned()
    }

    /// How many tokens were issued.
    pub fn len(&self) -> usize {
        self.entries.read().len()
    }

    /// True when none was issued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The entry of a service-account token: the user with the bound object's extra and a credential ID.
pub fn service_account_entry(
    namespace: &str,
    name: &str,
    uid: &str,
    bound: Option<(BoundObject, Option<(String, String)>)>,
    expires: Option<jiff::Timestamp>,
    audiences: Vec<String>,
) -> TokenEntry {
    let mut user = UserInfo {
        name: service_account_username(namespace, name),
        uid: uid.to_owned(),
        groups: service_account_groups(namespace),
        extra: Default::default(),
    };
    let mut extra = |key: &str, value: &str| {
        user.extra.insert(key.to_owned(), vec![value.to_owned()]);
    };
    extra(EXTRA_CREDENTIAL_ID, &format!("JTI={}", crate::object::new_uid()));
    let bound = bound.map(|(object, node)| {
        match &object {
            BoundObject::Pod { name, uid } => {
                extra(EXTRA_POD_NAME, name);
                extra(EXTRA_POD_UID, uid);
            }
            BoundObject::Node { name, uid } => {
                extra(EXTRA_NODE_NAME, name);
                extra(EXTRA_NODE_UID, uid);
            }
        }
        if let Some((node, node_uid)) = node {
            extra(EXTRA_NODE_NAME, &node);
            extra(EXTRA_NODE_UID, &node_uid);
        }
        object
    });
    TokenEntry {
        user,
        service_account: Some((namespace.to_owned(), name.to_owned(), uid.to_owned())),
        bound,
        expires,
        audiences,
    }
}

/// The bearer token of an `Authorization` header value (`Bearer <token>`, scheme case-insensitive).
pub fn bearer(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_taken_from_the_header() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
        assert_eq!(bearer("abc"), None);
    }

    #[test]
    fn node_bound_tokens_carry_the_node_extra_and_a_credential_id() {
        let bound = BoundObject::Node { name: "worker-0".into(), uid: "n-uid".into() };
        let entry = service_account_entry("ns", "sa", "sa-uid", Some((bound, None)), None, vec![]);
        assert_eq!(entry.user.name, "system:serviceaccount:ns:sa");
        assert_eq!(entry.user.extra_value(EXTRA_NODE_NAME), Some("worker-0"));
        assert_eq!(entry.user.extra_value(EXTRA_NODE_UID), Some("n-uid"));
        assert!(entry.user.extra_value(EXTRA_CREDENTIAL_ID).is_some_and(|id| id.starts_with("JTI=")));
        let tokens = Tokens::default();
        let (a, b) = (tokens.issue(entry.clone()), tokens.issue(entry));
        assert_ne!(a, b);
        assert_eq!(tokens.lookup(&a).map(|e| e.user.name), Some("system:serviceaccount:ns:sa".into()));
        assert!(tokens.lookup("nope").is_none());
    }
}
