//! update-operator's own manifest (`deploy/operator.yaml`, read from the file itself) in a dev cluster: its
//! namespace, service accounts, RBAC and ValidatingAdmissionPolicy installed, and the identities it grants, so that
//! the controller and the agents run with exactly the permissions a real install gives them.
//!
//! # Guarantees
//! - The controller's identity is the ServiceAccount its Deployment names; an agent's is the ServiceAccount of the
//!   DaemonSet, with a token bound to the agent's own Node (the node-name extra a projected token of a pod on that
//!   node carries), so the manifest's policy sees what it would on a real cluster.
//! - Nothing else of the manifest is installed: the dev cluster runs the operator's workloads itself (the harness).

use crate::apiserver::auth::{Identity, RbacIndex, Rule};
use crate::apiserver::store::Store;
use crate::apiserver::{ApiError, ApiServer, Gvr};
use kube::api::PostParams;
use serde::Deserialize;
use serde_json::Value;

/// `deploy/operator.yaml` as committed (compiled in, so every program of the dev cluster carries the same file).
pub const OPERATOR_YAML: &str = include_str!("../../deploy/operator.yaml");

/// The kinds [`install`] creates, in order.
const INSTALLED_KINDS: [&str; 8] = [
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "Role",
    "ClusterRoleBinding",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

/// What is wrong with a manifest.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A YAML document does not parse.
    #[error("deploy/operator.yaml does not parse: {0}")]
    Yaml(#[from] yaml_serde::Error),
    /// A workload the identities come from is missing.
    #[error("deploy/operator.yaml has no {0}")]
    Missing(&'static str),
    /// Installing an object failed.
    #[error("installing {what} failed: {source}")]
    Install {
        /// Which object.
        what: String,
        /// The API error.
        #[source]
        source: ApiError,
    },
}

/// A rule of one of the manifest's roles.
#[derive(Debug, Clone, PartialEq)]
pub struct RoleRule {
    /// `ClusterRole` or `Role`.
    pub kind: String,
    /// The role's name.
    pub role: String,
    /// Index of the rule in the role.
    pub index: usize,
    /// The rule.
    pub rule: Rule,
}

impl std::fmt::Display for RoleRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} rule {} {}", self.kind, self.role, self.index, self.rule.to_json())
    }
}

/// The documents of an operator manifest.
#[derive(Debug, Clone)]
pub struct Manifest {
    documents: Vec<Value>,
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

impl Manifest {
    /// The committed `deploy/operator.yaml`.
    pub fn operator() -> Result<Manifest, ManifestError> {
        Manifest::parse(OPERATOR_YAML)
    }

    /// Parses a multi-document YAML manifest (empty documents are skipped).
    pub fn parse(yaml: &str) -> Result<Manifest, ManifestError> {
        let mut documents = Vec::new();
        for document in yaml_serde::Deserializer::from_str(yaml) {
            let value = Value::deserialize(document)?;
            if !value.is_null() {
                documents.push(value);
            }
        }
        Ok(Manifest { documents })
    }

    /// Every document.
    pub fn documents(&self) -> &[Value] {
        &self.documents
    }

    /// The first document of `kind`.
    fn first(&self, kind: &'static str) -> Result<&Value, ManifestError> {
        self.documents.iter().find(|d| text(d, "/kind") == kind).ok_or(ManifestError::Missing(kind))
    }

    fn account_of(&self, kind: &'static str) -> Result<(String, String), ManifestError> {
        let workload = self.first(kind)?;
        let namespace = text(workload, "/metadata/namespace");
        let account = text(workload, "/spec/template/spec/serviceAccountName");
        if account.is_empty() {
            return Err(ManifestError::Missing("serviceAccountName in a workload"));
        }
        Ok((if namespace.is_empty() { "default" } else { namespace }.to_owned(), account.to_owned()))
    }

    /// The controller's identity: the ServiceAccount of the manifest's Deployment.
    pub fn controller_identity(&self) -> Result<Identity, ManifestError> {
        let (namespace, name) = self.account_of("Deployment")?;
        Ok(Identity::service_account(&namespace, &name))
    }

    /// The identity of the agent on `node`: the ServiceAccount of the manifest's DaemonSet, bound to `node`.
    pub fn agent_identity(&self, node: &str) -> Result<Identity, ManifestError> {
        let (namespace, name) = self.account_of("DaemonSet")?;
        Ok(Identity::service_account_on(&namespace, &name, node))
    }

    /// The RBAC objects (roles and bindings) of the manifest, indexed as the authorizer does.
    pub fn rbac(&self) -> RbacIndex {
        RbacIndex::from_objects(&self.documents)
    }

    /// Every rule of every Role and ClusterRole.
    pub fn role_rules(&self) -> Vec<RoleRule> {
        self.documents
            .iter()
            .filter(|d| matches!(text(d, "/kind"), "ClusterRole" | "Role"))
            .flat_map(|role| {
                let rules = role.get("rules").and_then(Value::as_array).cloned().unwrap_or_default();
                rules.into_iter().enumerate().map(|(index, rule)| RoleRule {
                    kind: text(role, "/kind").to_owned(),
                    role: text(role, "/metadata/name").to_owned(),
                    index,
                    rule: Rule::from_json(&rule),
                })
            })
            .collect()
    }

    /// The same manifest without one rule of one role.
    pub fn without(&self, rule: &RoleRule) -> Manifest {
        let mut documents = self.documents.clone();
        for document in &mut documents {
            if text(document, "/kind") == rule.kind
                && text(document, "/metadata/name") == rule.role
                && let Some(rules) = document.get_mut("rules").and_then(Value::as_array_mut)
                && rule.index < rules.len()
            {
                rules.remove(rule.index);
            }
        }
        Manifest { documents }
    }

    /// Creates the manifest's namespace, service accounts, RBAC objects and admission policies through `store`
    /// (as the server itself); objects that exist already are left as they are.
    pub fn install(&self, store: &Store) -> Result<(), ManifestError> {
        for kind in INSTALLED_KINDS {
            for document in self.documents.iter().filter(|d| text(d, "/kind") == kind) {
                let api_version = text(document, "/apiVersion");
                let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
                let plural = match kind {
                    "ValidatingAdmissionPolicy" => "validatingadmissionpolicies".to_owned(),
                    other => format!("{}s", other.to_lowercase()),
                };
                let gvr = Gvr::new(group, version, &plural);
                let namespace = document.pointer("/metadata/namespace").and_then(Value::as_str);
                let what = format!("{kind} {}", text(document, "/metadata/name"));
                match store.create(&gvr, namespace, document.clone(), &PostParams::default()) {
                    Ok(_) => {}
                    Err(error) if error.code == 409 => {}
                    Err(source) => return Err(ManifestError::Install { what, source }),
                }
            }
        }
        Ok(())
    }
}

/// Issues a token for an identity.
type TokenIssuer = std::sync::Arc<dyn Fn(&Identity) -> Result<String, ApiError> + Send + Sync>;

/// How the harness's components reach a dev cluster: its plain-HTTP URL and a token per identity.
#[derive(Clone)]
pub struct Access {
    url: String,
    tokens: TokenIssuer,
    manifest: Manifest,
}

impl Access {
    /// Installs the operator's manifest into `server` and hands out its identities' tokens.
    pub fn install(server: &ApiServer) -> Result<Access, ManifestError> {
        let manifest = Manifest::operator()?;
        manifest.install(&server.store().with_identity("dev/operator-manifest"))?;
        Ok(Access::of(server, manifest))
    }

    /// The identities of `manifest` on `server` (installed already).
    pub fn of(server: &ApiServer, manifest: Manifest) -> Access {
        let issuer = server.token_issuer();
        Access { url: server.url().to_owned(), tokens: std::sync::Arc::new(move |i: &Identity| issuer(i)), manifest }
    }

    /// The API server's plain-HTTP URL (also the base of the simulated hosts).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The manifest the identities come from.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// A token for the controller's ServiceAccount.
    pub fn controller_token(&self) -> Result<String, String> {
        let identity = self.manifest.controller_identity().map_err(|e| e.to_string())?;
        (self.tokens)(&identity).map_err(|e| e.to_string())
    }

    /// A token for the agent of `node` (bound to that Node).
    pub fn agent_token(&self, node: &str) -> Result<String, String> {
        let identity = self.manifest.agent_identity(node).map_err(|e| e.to_string())?;
        (self.tokens)(&identity).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_manifest_names_both_identities_and_its_roles() {
        let manifest = Manifest::operator().unwrap();
        assert_eq!(
            manifest.controller_identity().unwrap(),
            Identity::service_account("update-operator", "update-operator-controller")
        );
        assert_eq!(
            manifest.agent_identity("worker-0").unwrap(),
            Identity::service_account_on("update-operator", "update-operator-agent", "worker-0")
        );
        let rules = manifest.role_rules();
        assert!(rules.iter().any(|r| r.role == "update-operator-agent"));
        let first = &rules[0];
        let fewer = manifest.without(first).role_rules();
        assert_eq!(fewer.len(), rules.len() - 1);
        assert!(Manifest::parse("kind: Namespace\n---\n").unwrap().controller_identity().is_err());
    }
}
