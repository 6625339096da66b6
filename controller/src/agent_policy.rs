//! The startup check that the agents' ValidatingAdmissionPolicy is in force before agents get work.
//!
//! RBAC lets every agent patch every Node; only the manifest's ValidatingAdmissionPolicy confines an
//! agent to the agent annotations of its own Node. A cluster without the
//! `admissionregistration.k8s.io/v1` policy API (Kubernetes before 1.30) accepts the rest of the
//! manifest and leaves the agents unconfined, so the leader checks that the policy and a `Deny`
//! binding of it exist before it acts, and until then gives no agent an intent and says why in every
//! NodeVersion's status (written within its term, like every other write).

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use shared::crd::NodeVersion;
use std::time::Duration;

/// How often the check is repeated while the policy is not in force.
pub const RECHECK: Duration = Duration::from_secs(5);

/// The policy of `deploy/operator.yaml`; its binding has the same name.
pub const DEFAULT_POLICY: &str = "update-operator-agent-own-node";

/// The reason of the `Progressing=False` condition written while the policy is not in force.
pub const REASON: &str = "AgentPolicyMissing";

/// Why the agents' policy is not in force.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Missing {
    /// The policy does not exist, or the API does not (Kubernetes before 1.30).
    #[error(
        "ValidatingAdmissionPolicy {0} not found (admissionregistration.k8s.io/v1 needs Kubernetes 1.30 or later; \
         apply deploy/update-operator.yaml)"
    )]
    Policy(String),
    /// The binding does not exist.
    #[error("ValidatingAdmissionPolicyBinding {0} not found (apply deploy/update-operator.yaml)")]
    Binding(String),
    /// The binding binds another policy or does not deny.
    #[error("ValidatingAdmissionPolicyBinding {0} must bind policy {0} with validationActions [Deny]")]
    NotDenying(String),
    /// The API server did not answer the check.
    #[error("cannot read ValidatingAdmissionPolicy {name}: {error}")]
    Unreadable {
        /// The policy's name.
        name: String,
        /// What the API server answered.
        error: String,
    },
}

fn unreadable(name: &str, error: kube::Error) -> Missing {
    Missing::Unreadable { name: name.to_owned(), error: error.to_string() }
}

/// Checks that the policy `name` exists and a binding of the same name applies it with `Deny`.
pub async fn check(client: &Client, name: &str) -> Result<(), Missing> {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    if policies.get_opt(name).await.map_err(|e| unreadable(name, e))?.is_none() {
        return Err(Missing::Policy(name.to_owned()));
    }
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let binding =
        bindings.get_opt(name).await.map_err(|e| unreadable(name, e))?.ok_or_else(|| Missing::Binding(name.into()))?;
    let spec = binding.spec.unwrap_or_default();
    let denies = spec.validation_actions.unwrap_or_default().iter().any(|a| a == "Deny");
    if spec.policy_name.as_deref() != Some(name) || !denies {
        return Err(Missing::NotDenying(name.to_owned()));
    }
    Ok(())
}

/// The `Progressing=False` condition that says why no node is updated.
pub fn condition(missing: &Missing, generation: Option<i64>, now: Time) -> Condition {
    Condition {
        type_: crate::status::PROGRESSING.to_owned(),
        status: "False".to_owned(),
        reason: REASON.to_owned(),
        message: format!("no node is updated while the agents are unconfined: {missing}"),
        observed_generation: generation,
        last_transition_time: now,
    }
}

/// Writes [`condition`] into the status of `version`, keeping its other conditions.
pub async fn report(versions: &Api<NodeVersion>, version: &NodeVersion, missing: &Missing) -> Result<(), kube::Error> {
    let name = version.metadata.name.clone().unwrap_or_default();
    let now = Time(shared::protocol::truncate_to_seconds(jiff::Timestamp::now()));
    let mut conditions: Vec<Condition> = version.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    let updated = condition(missing, version.metadata.generation, now);
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == updated.type_) {
        if existing.status == updated.status && existing.reason == updated.reason && existing.message == updated.message
        {
            return Ok(());
        }
        *existing = updated;
    } else {
        conditions.insert(0, updated);
    }
    let patch = serde_json::json!({"status": {"conditions": conditions}});
    versions.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
}

/// The check the leader makes before it acts: the policy to look for, and whether it was found in
/// force (once found, it is not checked again, as at the start of any controller).
#[derive(Clone)]
pub struct Gate {
    pub client: Client,
    pub name: String,
    pub in_force: tokio::sync::watch::Sender<bool>,
}

impl Gate {
    /// A gate for the policy `name`, not yet found in force.
    pub fn new(client: Client, name: String) -> Gate {
        Gate { client, name, in_force: tokio::sync::watch::Sender::new(false) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_condition_names_what_is_missing() {
        let missing = Missing::Policy(DEFAULT_POLICY.into());
        let condition = condition(&missing, Some(3), Time(jiff::Timestamp::UNIX_EPOCH));
        assert_eq!((condition.type_.as_str(), condition.status.as_str()), ("Progressing", "False"));
        assert_eq!(condition.reason, REASON);
        assert_eq!(condition.observed_generation, Some(3));
        assert!(condition.message.contains("Kubernetes 1.30"), "{}", condition.message);
    }
}
