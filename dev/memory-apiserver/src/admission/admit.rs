//! Validating admission on the write path: [`Core::admit`] runs the stored policies (compiled once, then cached
//! in the core's [`super::Admission`] until a policy or binding changes) for a write made as a user. It reaches
//! into the server core, which holds that cache, so it lives apart from the policies themselves.

use super::{Operation, PolicySet, Request};
use crate::core::{Core, Ctx};
use crate::error::ApiError;
use crate::object::object_key;
use crate::resource::{Builtin, ResourceType};
use crate::state::State;
use serde_json::Value;
use std::sync::Arc;

impl Core {
    /// The compiled policies of `state`.
    fn policy_set(&self, state: &State) -> Arc<PolicySet> {
        if let Some(set) = self.admission.policies.read().as_ref() {
            return set.clone();
        }
        let objects: Vec<Value> = [Builtin::ValidatingAdmissionPolicy, Builtin::ValidatingAdmissionPolicyBinding]
            .into_iter()
            .flat_map(|kind| state.objects(&self.builtin(kind)).values().map(|o| o.value()).collect::<Vec<_>>())
            .collect();
        let set = Arc::new(PolicySet::from_objects(&objects));
        *self.admission.policies.write() = Some(set.clone());
        set
    }

    /// Runs validating admission for a write made as `ctx.user` (nothing for in-process writers without one);
    /// records `Warn` results in `ctx.warnings`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn admit(
        &self,
        state: &State,
        ctx: &Ctx<'_>,
        rt: &ResourceType,
        operation: Operation,
        subresource: &str,
        object: Option<&Value>,
        old_object: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(user) = ctx.user else { return Ok(()) };
        let set = self.policy_set(state);
        if set.is_empty() {
            return Ok(());
        }
        let named = object.or(old_object);
        let field = |key: &str| named.and_then(|o| o.pointer(key)).and_then(Value::as_str).unwrap_or_default();
        let (name, namespace) = (field("/metadata/name"), field("/metadata/namespace"));
        let namespace_value = if rt.namespaced && set.needs_namespace() {
            let namespaces = self.builtin(Builtin::Namespace);
            state.get(&namespaces, &object_key(None, namespace)).map(|n| n.value())
        } else {
            None
        };
        let request = Request {
            operation,
            group: &rt.group,
            version: &rt.version,
            resource: &rt.plural,
            subresource,
            kind: &rt.kind,
            name,
            namespace,
            namespaced: rt.namespaced,
            object,
            old_object,
            namespace_object: namespace_value.as_ref(),
            user,
            dry_run: ctx.dry_run,
        };
        let warnings = set.admit(&request)?;
        if let Some(sink) = ctx.warnings
            && !warnings.is_empty()
        {
            sink.lock().extend(warnings);
        }
        Ok(())
    }
}
