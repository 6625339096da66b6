//! Authentication (bearer tokens), impersonation and authorization (`system:masters`, then RBAC) of requests, as
//! kube-apiserver's filter chain does them with anonymous authentication off.
//!
//! # Guarantees
//! - A request without a valid token is 401 `Unauthorized` (every path but the `/_dev/` tools).
//! - Members of `system:masters` (the admin token every default client uses) are allowed everything; everyone else
//!   is decided by RBAC over the stored Roles, ClusterRoles and bindings, rebuilt after any of them changes.
//! - `Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid` and `Impersonate-Extra-*` switch the user after the
//!   requester is authorized for the `impersonate` verb on each (users, groups, serviceaccounts, uids, userextras).
//! - When recording is on ([`AccessLog`]), every authorization decision for a user outside `system:masters` is kept
//!   once per (user, attributes).

pub mod attributes;
pub mod bootstrap;
pub mod printers;
pub mod rbac;
pub mod reviews;
pub mod state;
pub mod tokens;
pub mod user;

pub use attributes::Attributes;
pub use rbac::{Decision, RbacIndex, Rule};
pub use state::Auth;
pub use tokens::{API_AUDIENCE, BoundObject, TokenEntry, Tokens};
pub use user::{Identity, IdentityError, UserInfo};

use super::core::{Core, Ctx};
use super::error::ApiError;
use super::object::{format_time, object_key};
use super::resource::Builtin;
use crate::schema::{ErrorKind, field_error};

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokens::service_account_entry;

/// Shortest lifetime a TokenRequest may ask for (upstream: 10 minutes).
const MIN_TOKEN_SECONDS: i64 = 600;
/// Lifetime of a TokenRequest that names none (upstream: one hour).
const DEFAULT_TOKEN_SECONDS: i64 = 3600;
/// Longest lifetime a TokenRequest may ask for (upstream: 2^32 seconds).
const MAX_TOKEN_SECONDS: i64 = 1 << 32;

/// One recorded authorization decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRecord {
    /// The user's name.
    pub user: String,
    /// What was asked.
    pub attributes: Attributes,
    /// Whether it was allowed.
    pub allowed: bool,
}

/// The authorization decisions of users outside `system:masters`, recorded while on (each distinct request once):
/// what a least-privilege check of a role needs.
#[derive(Clone)]
pub struct AccessLog {
    core: Arc<Core>,
}

impl AccessLog {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        AccessLog { core }
    }

    /// Starts recording (keeps what was recorded).
    pub fn start(&self) {
        self.core.auth.log.lock().get_or_insert_with(BTreeMap::new);
    }

    /// Stops recording and forgets the records.
    pub fn stop(&self) {
        *self.core.auth.log.lock() = None;
    }

    /// The records so far, ordered by user and attributes.
    pub fn records(&self) -> Vec<AccessRecord> {
        let log = self.core.auth.log.lock();
        log.iter()
            .flatten()
            .map(|((user, attributes), allowed)| AccessRecord {
                user: user.clone(),
                attributes: attributes.clone(),
                allowed: *allowed,
            })
            .collect()
    }
}

fn strings_of(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

impl Core {
    /// The user of an `Authorization` header value, or 401.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<UserInfo, ApiError> {
        let token = authorization.and_then(tokens::bearer).ok_or_else(attributes::unauthorized)?;
        self.authenticate_token(token, &[API_AUDIENCE.to_owned()]).map(|(user, _)| user)
    }

    /// Validates a token for one of `audiences` (upstream's default when empty: the API server's); returns its
    /// user and the audiences it is valid for.
    pub fn authenticate_token(&self, token: &str, audiences: &[String]) -> Result<(UserInfo, Vec<String>), ApiError> {
        let entry = self.auth.tokens.lookup(token).ok_or_else(attributes::unauthorized)?;
        let wanted: Vec<String> = if audiences.is_empty() { vec![API_AUDIENCE.to_owned()] } else { audiences.to_vec() };
        let matched: Vec<String> = wanted.into_iter().filter(|a| entry.audiences.contains(a)).collect();
        if matched.is_empty() || entry.expires.is_some_and(|at| at <= jiff::Timestamp::now()) {
            return Err(attributes::unauthorized());
        }
        if let Some((namespace, name, uid)) = &entry.service_account {
            let state = self.state.lock();
            let exists = |kind: Builtin, namespace: Option<&str>, name: &str, uid: &str| {
                state.get(&self.builtin(kind), &object_key(namespace, name)).is_some_and(|o| &*o.index.uid == uid)
            };
            let valid = exists(Builtin::ServiceAccount, Some(namespace), name, uid)
                && match &entry.bound {
                    None => true,
                    Some(BoundObject::Pod { name, uid }) => exists(Builtin::Pod, Some(namespace), name, uid),
                    Some(BoundObject::Node { name, uid }) => exists(Builtin::Node, None, name, uid),
                };
            if !valid {
                return Err(attributes::unauthorized());
            }
        }
        Ok((entry.user, matched))
    }

    /// Applies the impersonation headers of a request made by `requester` (upstream's `WithImpersonation`).
    pub fn impersonate(&self, requester: UserInfo, headers: &http::HeaderMap) -> Result<UserInfo, ApiError> {
        let values = |name: &str| -> Vec<String> {
            headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).map(str::to_owned).collect()
        };
        let user = values("impersonate-user").into_iter().next().filter(|u| !u.is_empty());
        let groups = values("impersonate-group");
        let uid = values("impersonate-uid").into_iter().next().filter(|u| !u.is_empty());
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in headers {
            if let Some(key) = name.as_str().strip_prefix("impersonate-extra-")
                && let Ok(value) = value.to_str()
            {
                let key = percent_decode(key);
                extra.entry(key).or_default().push(value.to_owned());
            }
        }
        let Some(username) = user else {
            if !groups.is_empty() || !extra.is_empty() || uid.is_some() {
                return Err(ApiError::bad_request(
                    "requested impersonation of groups, extra or uid without impersonating a user",
                ));
            }
            return Ok(requester);
        };
        let check = |attributes: Attributes| -> Result<(), ApiError> {
            let decision = self.decide(&requester, &attributes);
            if decision.allowed { Ok(()) } else { Err(attributes.forbidden(&requester.name, &decision.reason)) }
        };
        let mut impersonated = match user::split_service_account_username(&username) {
            Some((namespace, name)) => {
                check(Attributes::resource("impersonate", "", "", "serviceaccounts", "", namespace, name))?;
                let mut groups = user::service_account_groups(namespace);
                groups.retain(|g| g != user::AUTHENTICATED);
                UserInfo { name: username.clone(), uid: String::new(), groups, extra: BTreeMap::new() }
            }
            None => {
                check(Attributes::resource("impersonate", "", "", "users", "", "", &username))?;
                UserInfo { name: username.clone(), ..UserInfo::default() }
            }
        };
        if !groups.is_empty() {
            impersonated.groups.clear();
        }
        for group in groups {
            check(Attributes::resource("impersonate", "", "", "groups", "", "", &group))?;
            impersonated.groups.push(group);
        }
        for (key, values) in &extra {
            for value in values {
                check(Attributes::resource(
                    "impersonate",
                    "authentication.k8s.io",
                    "v1",
                    "userextras",
                    key,
                    "",
                    value,
                ))?;
            }
        }
        impersonated.extra = extra;
        if let Some(uid) = uid {
            check(Attributes::resource("impersonate", "authentication.k8s.io", "v1", "uids", "", "", &uid))?;
            impersonated.uid = uid;
        }
        let special = ["system:authenticated", "system:unauthenticated"];
        if username != "system:anonymous" && !impersonated.groups.iter().any(|g| special.contains(&g.as_str())) {
            impersonated.groups.push(user::AUTHENTICATED.to_owned());
        }
        Ok(impersonated)
    }

    /// The RBAC index of the stored objects (rebuilt when one of them changed).
    pub fn rbac_index(&self) -> Arc<RbacIndex> {
        if let Some(index) = self.auth.rbac.read().as_ref() {
            return index.clone();
        }
        // IMPORTANT: build and publish under the state lock. Writes of RBAC objects invalidate under it too, so an
        // index built from a state older than the last write is never published after that invalidation.
        let state = self.state.lock();
        let objects: Vec<Value> =
            [Builtin::ClusterRole, Builtin::ClusterRoleBinding, Builtin::Role, Builtin::RoleBinding]
                .into_iter()
                .flat_map(|kind| state.objects(&self.builtin(kind)).values().map(|o| o.value()).collect::<Vec<_>>())
                .collect();
        let index = Arc::new(RbacIndex::from_objects(&objects));
        *self.auth.rbac.write() = Some(index.clone());
        drop(state);
        index
    }

    /// Decides a request: `system:masters` is allowed everything, RBAC decides the rest.
    pub fn decide(&self, user: &UserInfo, attributes: &Attributes) -> Decision {
        if user.is_privileged() {
            return Decision { allowed: true, reason: String::new() };
        }
        let decision = self.rbac_index().authorize(user, attributes);
        if let Some(log) = self.auth.log.lock().as_mut() {
            log.entry((user.name.clone(), attributes.clone())).or_insert(decision.allowed);
        }
        decision
    }

    /// [`Core::decide`], as the 403 upstream answers when denied.
    pub fn authorize(&self, user: &UserInfo, attributes: &Attributes) -> Result<(), ApiError> {
        let decision = self.decide(user, attributes);
        if decision.allowed { Ok(()) } else { Err(attributes.forbidden(&user.name, &decision.reason)) }
    }

    /// A token for `identity`, valid until the ServiceAccount (or bound Node) goes. A missing ServiceAccount is
    /// created (in an existing namespace), as `kubectl create serviceaccount` would.
    pub fn issue_token(&self, identity: &Identity) -> Result<String, ApiError> {
        let (namespace, name, node) = match identity {
            Identity::Admin => return Ok(self.auth.admin_token.clone()),
            Identity::User { name, groups } => {
                let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
                return Ok(self.auth.tokens.issue(TokenEntry {
                    user: UserInfo::user(name, &groups),
                    service_account: None,
                    bound: None,
                    expires: None,
                    audiences: vec![API_AUDIENCE.to_owned()],
                }));
            }
            Identity::ServiceAccount { namespace, name, node } => (namespace, name, node),
        };
        let accounts = self.builtin(Builtin::ServiceAccount);
        let account = match self.get(&accounts, Some(namespace), name) {
            Ok(account) => account,
            Err(error) if error.code == 404 => {
                let body = json!({"metadata": {"name": name, "namespace": namespace}});
                self.create(&accounts, Some(namespace), body, &Ctx::new("dev/tokens"))?
            }
            Err(error) => return Err(error),
        };
        let bound = match node {
            Some(node) => {
                let stored = self.get(&self.builtin(Builtin::Node), None, node)?;
                Some((BoundObject::Node { name: node.clone(), uid: stored.index.uid.to_string() }, None))
            }
            None => None,
        };
        let entry =
            service_account_entry(namespace, name, &account.index.uid, bound, None, vec![API_AUDIENCE.to_owned()]);
        Ok(self.auth.tokens.issue(entry))
    }

    /// `POST serviceaccounts/NAME/token`: a TokenRequest answered with a token (bound to a Pod or Node when
    /// `spec.boundObjectRef` names one).
    pub fn token_request(&self, namespace: &str, name: &str, body: &Value) -> Result<Value, ApiError> {
        let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
        let seconds = spec.get("expirationSeconds").and_then(Value::as_i64).unwrap_or(DEFAULT_TOKEN_SECONDS);
        let invalid = |message: String| {
            ApiError::invalid_named(
                "TokenRequest.authentication.k8s.io",
                "authentication.k8s.io",
                "TokenRequest",
                name,
                &[field_error("spec.expirationSeconds", ErrorKind::Invalid, message)],
            )
        };
        if seconds < MIN_TOKEN_SECONDS {
            return Err(invalid(format!("Invalid value: {seconds}: may not specify a duration less than 10 minutes")));
        }
        if seconds > MAX_TOKEN_SECONDS {
            return Err(invalid(format!(
                "Invalid value: {seconds}: may not specify a duration larger than 2^32 seconds"
            )));
        }
        let account = self.get(&self.builtin(Builtin::ServiceAccount), Some(namespace), name)?;
        let bound = match spec.get("boundObjectRef").filter(|r| !r.is_null()) {
            None => None,
            Some(reference) => {
                let field = |key: &str| reference.get(key).and_then(Value::as_str).unwrap_or_default();
                let (api_version, kind, object_name) = (field("apiVersion"), field("kind"), field("name"));
                let (object, uid, node) = match (api_version, kind) {
                    ("v1" | "", "Pod") => {
                        let pod = self.get(&self.builtin(Builtin::Pod), Some(namespace), object_name)?.value();
                        let account_of = pod.pointer("/spec/serviceAccountName").and_then(Value::as_str);
                        if account_of.unwrap_or("default") != name {
                            return Err(ApiError::bad_request(format!(
                                "cannot bind token for serviceaccount {name:?} to pod running with serviceaccount {:?}",
                                account_of.unwrap_or_default()
                            )));
                        }
                        let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_owned();
                        let node = match pod.pointer("/spec/nodeName").and_then(Value::as_str) {
                            Some(node) if !node.is_empty() => self
                                .get(&self.builtin(Builtin::Node), None, node)
                                .ok()
                                .map(|n| (node.to_owned(), n.index.uid.to_string())),
                            _ => None,
                        };
                        (BoundObject::Pod { name: object_name.to_owned(), uid: uid.clone() }, uid, node)
                    }
                    ("v1" | "", "Node") => {
                        let uid = self.get(&self.builtin(Builtin::Node), None, object_name)?.index.uid.to_string();
                        (BoundObject::Node { name: object_name.to_owned(), uid: uid.clone() }, uid, None)
                    }
                    _ => {
                        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or_default();
                        let version = api_version.rsplit_once('/').map_or(api_version, |(_, v)| v);
                        return Err(ApiError::bad_request(format!(
                            "cannot bind token to object of type {group}/{version}, Kind={kind}"
                        )));
                    }
                };
                let given = field("uid");
                if !given.is_empty() && given != uid {
                    return Err(ApiError::new(
                        409,
                        "Conflict",
                        format!(
                            "Operation cannot be fulfilled on {kind} \"{object_name}\": the UID in the bound object reference ({given}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
                        ),
                    ));
                }
                Some((object, node))
            }
        };
        let mut audiences = strings_of(spec.get("audiences"));
        if audiences.is_empty() {
            audiences.push(API_AUDIENCE.to_owned());
        }
        let now = jiff::Timestamp::now();
        let expires = now.checked_add(jiff::SignedDuration::from_secs(seconds)).unwrap_or(now);
        let entry = service_account_entry(namespace, name, &account.index.uid, bound, Some(expires), audiences.clone());
        let token = self.auth.tokens.issue(entry);
        let mut answered_spec = spec;
        answered_spec["audiences"] = json!(audiences);
        answered_spec["expirationSeconds"] = json!(seconds);
        Ok(json!({
            "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": format_time(now)},
            "spec": answered_spec,
            "status": {"token": token, "expirationTimestamp": format_time(expires)}
        }))
    }
}

/// Decodes `%XX` escapes of an `Impersonate-Extra-` key (upstream `url.PathUnescape`); malformed input is kept.
fn percent_decode(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_keys_are_percent_decoded() {
        assert_eq!(
            percent_decode("authentication.kubernetes.io%2fnode-name"),
            "authentication.kubernetes.io/node-name"
        );
        assert_eq!(percent_decode("plain"), "plain");
        assert_eq!(percent_decode("bad%zz"), "bad%zz");
    }
}
