//! The built-in kinds the server serves, as one enum that the code keyed by kind matches on (their discovery data,
//! types and selectable fields are in [`super::builtin`]).

/// The built-in kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// core/v1 Namespace.
    Namespace,
    /// core/v1 Node.
    Node,
    /// core/v1 Pod.
    Pod,
    /// core/v1 ConfigMap.
    ConfigMap,
    /// core/v1 Secret.
    Secret,
    /// core/v1 ServiceAccount.
    ServiceAccount,
    /// core/v1 Service.
    Service,
    /// scheduling.k8s.io/v1 PriorityClass.
    PriorityClass,
    /// batch/v1 Job.
    Job,
    /// core/v1 Event.
    CoreEvent,
    /// events.k8s.io/v1 Event.
    Event,
    /// policy/v1 PodDisruptionBudget.
    PodDisruptionBudget,
    /// coordination.k8s.io/v1 Lease.
    Lease,
    /// apps/v1 Deployment.
    Deployment,
    /// apps/v1 ReplicaSet.
    ReplicaSet,
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// apps/v1 DaemonSet.
    DaemonSet,
    /// apps/v1 ControllerRevision.
    ControllerRevision,
    /// apiextensions.k8s.io/v1 CustomResourceDefinition.
    CustomResourceDefinition,
    /// rbac.authorization.k8s.io/v1 ClusterRole.
    ClusterRole,
    /// rbac.authorization.k8s.io/v1 ClusterRoleBinding.
    ClusterRoleBinding,
    /// rbac.authorization.k8s.io/v1 Role.
    Role,
    /// rbac.authorization.k8s.io/v1 RoleBinding.
    RoleBinding,
    /// admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy.
    ValidatingAdmissionPolicy,
    /// admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding.
    ValidatingAdmissionPolicyBinding,
    /// authorization.k8s.io/v1 SelfSubjectAccessReview (create only, never stored).
    SelfSubjectAccessReview,
    /// authorization.k8s.io/v1 SelfSubjectRulesReview (create only).
    SelfSubjectRulesReview,
    /// authorization.k8s.io/v1 SubjectAccessReview (create only).
    SubjectAccessReview,
    /// authorization.k8s.io/v1 LocalSubjectAccessReview (create only).
    LocalSubjectAccessReview,
    /// authentication.k8s.io/v1 SelfSubjectReview (create only).
    SelfSubjectReview,
    /// authentication.k8s.io/v1 TokenReview (create only).
    TokenReview,
}

impl Builtin {
    /// The review kinds: answered on create, never stored, no other verb.
    pub fn is_review(self) -> bool {
        matches!(
            self,
            Builtin::SelfSubjectAccessReview
                | Builtin::SelfSubjectRulesReview
                | Builtin::SubjectAccessReview
                | Builtin::LocalSubjectAccessReview
                | Builtin::SelfSubjectReview
                | Builtin::TokenReview
        )
    }

    /// The RBAC kinds, whose changes the authorizer follows.
    pub fn is_rbac(self) -> bool {
        matches!(self, Builtin::ClusterRole | Builtin::ClusterRoleBinding | Builtin::Role | Builtin::RoleBinding)
    }

    /// The admission policy kinds, whose changes admission follows.
    pub fn is_admission_policy(self) -> bool {
        matches!(self, Builtin::ValidatingAdmissionPolicy | Builtin::ValidatingAdmissionPolicyBinding)
    }
}
