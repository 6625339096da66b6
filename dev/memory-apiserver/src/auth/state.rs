//! The authentication and authorization state one server holds: the issued tokens, the admin's, the RBAC index
//! (rebuilt after a role or binding changes) and the access log while it records.

use super::attributes::Attributes;
use super::rbac::RbacIndex;
use super::tokens::{API_AUDIENCE, TokenEntry, Tokens};
use super::user::UserInfo;
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The authentication and authorization state of one server.
pub struct Auth {
    /// Issued tokens.
    pub tokens: Tokens,
    pub(super) admin_token: String,
    pub(super) rbac: RwLock<Option<Arc<RbacIndex>>>,
    pub(super) log: Mutex<Option<BTreeMap<(String, Attributes), bool>>>,
}

impl Default for Auth {
    fn default() -> Self {
        let tokens = Tokens::default();
        let admin_token = tokens.issue(TokenEntry {
            user: UserInfo::admin(),
            service_account: None,
            bound: None,
            expires: None,
            audiences: vec![API_AUDIENCE.to_owned()],
        });
        Auth { tokens, admin_token, rbac: RwLock::new(None), log: Mutex::new(None) }
    }
}

impl Auth {
    /// The administrator's token (group `system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// Forgets the RBAC index: the next authorization rebuilds it from the store.
    pub fn rbac_changed(&self) {
        *self.rbac.write() = None;
    }
}
