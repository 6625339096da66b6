//! ValidatingAdmissionPolicy: the stored `admissionregistration.k8s.io/v1` policies and bindings, evaluated with
//! CEL on every write of a request that carries a user (HTTP requests, and in-process calls made with
//! [`crate::Store::as_user`]), as upstream's `admission/plugin/policy/validating` does.
//!
//! # Guarantees
//! - A binding applies its policy when the policy's `matchConstraints` and the binding's `matchResources` select
//!   the request and every `matchCondition` is true; then every `validation` is evaluated over `object`,
//!   `oldObject` (null on CREATE; `object` is null on DELETE), `request` (operation, userInfo with extra, name,
//!   namespace, kind, resource, subResource, dryRun), `namespaceObject` and `variables` (in order; one that fails
//!   to evaluate is absent, so only expressions that read it fail).
//! - A false validation denies with its `messageExpression` (a non-empty single-line string), else its `message`,
//!   else `failed expression: EXPR`; its `reason` (default `Invalid`) gives the code: 422 Invalid, 403 Forbidden,
//!   401 Unauthorized, 413 RequestEntityTooLarge. An expression that fails (or a policy that does not compile) is
//!   a denial under `failurePolicy: Fail` (the default) and ignored under `Ignore`.
//! - `validationActions`: `Deny` refuses the request with upstream's message (`ValidatingAdmissionPolicy 'P' with
//!   binding 'B' denied request: MSG`, in a `Status` with that message as its one cause); `Warn` adds a `Warning`
//!   header (`Validation failed for ValidatingAdmissionPolicy 'P' with binding 'B': MSG`); `Audit` is accepted
//!   and has no effect (the dev cluster keeps no audit log).
//! - `paramKind` is not supported: such a policy fails to configure (per its `failurePolicy`); a binding's
//!   `paramRef` is ignored for policies without `paramKind`, as upstream does.
//!
//! # Assumptions
//! - No CEL cost budget and no type checking (see [`expressions`]); `authorizer` is not available.

mod admit;
pub mod expressions;
pub mod matching;
pub mod request;
pub mod validation;

pub use request::{Operation, Request};

use crate::error::{ApiError, Cause};
use expressions::{Expression, Inputs, Reads};
use matching::MatchResources;
use parking_lot::RwLock;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// What a failed or erroring expression does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FailurePolicy {
    Fail,
    Ignore,
}

#[derive(Debug, Clone)]
struct Validation {
    expression: Result<Expression, String>,
    message: String,
    message_expression: Option<Result<Expression, String>>,
    reason: Option<String>,
}

/// A compiled ValidatingAdmissionPolicy.
#[derive(Debug)]
struct Policy {
    failure_policy: FailurePolicy,
    /// Why the policy cannot be used at all (a selector that does not parse, `paramKind`).
    configuration_error: Option<String>,
    constraints: Option<MatchResources>,
    match_conditions: Vec<(String, Result<Expression, String>)>,
    variables: Vec<(String, Result<Expression, String>)>,
    validations: Vec<Validation>,
    reads: Reads,
}

fn compile(source: &str) -> Result<Expression, String> {
    Expression::compile(source).map_err(|e| format!("compilation failed: {e}"))
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

impl Policy {
    fn from_json(object: &Value) -> Policy {
        let spec = object.get("spec").cloned().unwrap_or_else(|| json!({}));
        let failure_policy = match text(&spec, "/failurePolicy") {
            "Ignore" => FailurePolicy::Ignore,
            _ => FailurePolicy::Fail,
        };
        let mut configuration_error = None;
        let constraints = match spec.get("matchConstraints").map(MatchResources::from_json) {
            Some(Ok(constraints)) => Some(constraints),
            Some(Err(error)) => {
                configuration_error = Some(format!("failed to configure policy: {error}"));
                None
            }
            None => None,
        };
        if spec.get("paramKind").is_some_and(|p| !p.is_null()) {
            configuration_error =
                Some("failed to configure policy: paramKind is not supported by the dev cluster".to_owned());
        }
        let named = |key: &str| -> Vec<(String, Result<Expression, String>)> {
            spec.get(key)
                .and_then(Value::as_array)
                .map(|items| {
                    items.iter().map(|i| (text(i, "/name").to_owned(), compile(text(i, "/expression")))).collect()
                })
                .unwrap_or_default()
        };
        let match_conditions = named("matchConditions");
        let variables = named("variables");
        let validations: Vec<Validation> = spec
            .get("validations")
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .map(|v| Validation {
                        expression: compile(text(v, "/expression")),
                        message: text(v, "/message").to_owned(),
                        message_expression: v
                            .get("messageExpression")
                            .and_then(Value::as_str)
                            .filter(|m| !m.is_empty())
                            .map(compile),
                        reason: v.get("reason").and_then(Value::as_str).map(str::to_owned),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut reads = Reads::default();
        let mut note = |e: &Result<Expression, String>| {
            if let Ok(e) = e {
                reads = reads.union(e.reads());
            }
        };
        match_conditions.iter().chain(&variables).for_each(|(_, e)| note(e));
        for validation in &validations {
            note(&validation.expression);
            if let Some(m) = &validation.message_expression {
                note(m);
            }
        }
        Policy { failure_policy, configuration_error, constraints, match_conditions, variables, validations, reads }
    }
}

/// One `validationActions` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Deny,
    Warn,
    Audit,
}

#[derive(Debug)]
struct Binding {
    name: String,
    policy: String,
    actions: Vec<Action>,
    match_resources: Option<Result<MatchResources, String>>,
}

impl Binding {
    fn from_json(object: &Value) -> Binding {
        let actions = object
            .pointer("/spec/validationActions")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| match v.as_str() {
                        Some("Deny") => Some(Action::Deny),
                        Some("Warn") => Some(Action::Warn),
                        Some("Audit") => Some(Action::Audit),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        Binding {
            name: text(object, "/metadata/name").to_owned(),
            policy: text(object, "/spec/policyName").to_owned(),
            actions,
            match_resources: object
                .pointer("/spec/matchResources")
                .filter(|m| !m.is_null())
                .map(MatchResources::from_json),
        }
    }
}

/// The stored policies and bindings, compiled.
#[derive(Debug, Default)]
pub struct PolicySet {
    policies: HashMap<String, (String, Arc<Policy>)>,
    bindings: Vec<Binding>,
}

/// The outcome of one validation.
enum Decision {
    Admit,
    Deny { message: String, reason: String },
}

impl PolicySet {
    /// Compiles policies and bindings (`ValidatingAdmissionPolicy` and `ValidatingAdmissionPolicyBinding` by their
    /// `kind`; other objects are ignored).
    pub fn from_objects<'a>(objects: impl IntoIterator<Item = &'a Value>) -> PolicySet {
        let mut set = PolicySet::default();
        for object in objects {
            match object.get("kind").and_then(Value::as_str) {
                Some("ValidatingAdmissionPolicy") => {
                    let name = text(object, "/metadata/name").to_owned();
                    set.policies.insert(name.clone(), (name, Arc::new(Policy::from_json(object))));
                }
                Some("ValidatingAdmissionPolicyBinding") => set.bindings.push(Binding::from_json(object)),
                _ => {}
            }
        }
        set.bindings.sort_by(|a, b| a.name.cmp(&b.name));
        set
    }

    /// True when a binding exists (nothing to do otherwise).
    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    /// True when some policy needs the request's Namespace object.
    fn needs_namespace(&self) -> bool {
        self.policies.values().any(|(_, p)| p.reads.namespace_object || p.constraints.is_some())
    }

    /// Admits or denies `request`; returns the warnings of `Warn` bindings.
    pub fn admit(&self, request: &Request<'_>) -> Result<Vec<String>, ApiError> {
        let mut warnings = Vec::new();
        for binding in &self.bindings {
            let Some((policy_name, policy)) = self.policies.get(&binding.policy) else { continue };
            let selected = policy.constraints.as_ref().is_some_and(|c| c.matches(request, true))
                && match &binding.match_resources {
                    None => true,
                    Some(Ok(resources)) => resources.matches(request, false),
                    Some(Err(_)) => true,
                };
            if !selected && policy.configuration_error.is_none() {
                continue;
            }
            let decisions = match (&policy.configuration_error, &binding.match_resources) {
                (Some(error), _) => vec![error_decision(policy.failure_policy, error.clone())],
                (None, Some(Err(error))) => {
                    vec![error_decision(policy.failure_policy, format!("failed to configure binding: {error}"))]
                }
                (None, _) => evaluate(policy, request),
            };
            for decision in decisions {
                let Decision::Deny { message, reason } = decision else { continue };
                for action in &binding.actions {
                    match action {
                        Action::Deny => return Err(denial(request, policy_name, &binding.name, &message, &reason)),
                        Action::Warn => warnings.push(format!(
                            "Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding '{}': {message}",
                            binding.name
                        )),
                        Action::Audit => {}
                    }
                }
            }
        }
        Ok(warnings)
    }
}

fn error_decision(failure_policy: FailurePolicy, message: String) -> Decision {
    match failure_policy {
        FailurePolicy::Ignore => Decision::Admit,
        FailurePolicy::Fail => Decision::Deny { message, reason: String::new() },
    }
}

fn evaluation_error(expression: &Expression, error: &str) -> String {
    format!("expression '{}' resulted in error: {error}", expression.source)
}

/// Converts what `reads` names and `inputs` lacks.
fn provide(inputs: &mut Inputs, done: &mut Reads, reads: Reads, request: &Request<'_>) {
    if reads.request && !done.request {
        inputs.set("request", &request.to_json());
    }
    if reads.object && !done.object {
        inputs.set("object", request.object.unwrap_or(&Value::Null));
    }
    if reads.old_object && !done.old_object {
        inputs.set("oldObject", request.old_object.unwrap_or(&Value::Null));
    }
    if reads.namespace_object && !done.namespace_object {
        inputs.set("namespaceObject", request.namespace_object.unwrap_or(&Value::Null));
    }
    *done = done.union(reads);
}

/// Evaluates one policy for a request it selects. Inputs are converted to CEL only when an expression reads them,
/// match conditions' first: a request they turn away costs no conversion of the objects.
fn evaluate(policy: &Policy, request: &Request<'_>) -> Vec<Decision> {
    let mut inputs = Inputs::default();
    let mut done = Reads::default();
    let condition_reads = policy
        .match_conditions
        .iter()
        .filter_map(|(_, c)| c.as_ref().ok())
        .fold(Reads::default(), |r, c| r.union(c.reads()));
    provide(&mut inputs, &mut done, condition_reads, request);
    // Match conditions: any false skips the policy; otherwise any error is an error of the policy.
    let mut condition_error = None;
    for (name, condition) in &policy.match_conditions {
        match condition
            .as_ref()
            .map_err(String::clone)
            .and_then(|c| c.condition(&inputs).map_err(|e| evaluation_error(c, &e)))
        {
            Ok(true) => {}
            Ok(false) => return Vec::new(),
            Err(error) => {
                condition_error.get_or_insert_with(|| format!("matchCondition '{name}': {error}"));
            }
        }
    }
    if let Some(error) = condition_error {
        return vec![error_decision(policy.failure_policy, error)];
    }
    provide(&mut inputs, &mut done, policy.reads, request);
    if policy.reads.variables {
        // Each variable sees the ones before it; one that fails to evaluate stays absent.
        let mut values: HashMap<String, cel::Value> = HashMap::new();
        inputs.set_value("variables", cel::Value::from(values.clone()));
        for (name, expression) in &policy.variables {
            if let Ok(value) = expression.as_ref().map_err(String::clone).and_then(|e| e.evaluate(&inputs)) {
                values.insert(name.clone(), value);
                inputs.set_value("variables", cel::Value::from(values.clone()));
            }
        }
    }
    policy
        .validations
        .iter()
        .map(|validation| {
            let expression = match &validation.expression {
                Ok(expression) => expression,
                Err(error) => return error_decision(policy.failure_policy, error.clone()),
            };
            match expression.condition(&inputs) {
                Ok(true) => Decision::Admit,
                Ok(false) => {
                    let from_expression = match &validation.message_expression {
                        Some(Ok(m)) => match m.evaluate(&inputs) {
                            Ok(cel::Value::String(s)) => Some(s.trim().to_owned()),
                            _ => None,
                        },
                        _ => None,
                    }
                    .filter(|m| !m.is_empty() && !m.contains('\n'));
                    let message = from_expression
                        .or_else(|| Some(validation.message.trim().to_owned()).filter(|m| !m.is_empty()))
                        .unwrap_or_else(|| format!("failed expression: {}", expression.source.trim()));
                    Decision::Deny { message, reason: validation.reason.clone().unwrap_or_else(|| "Invalid".into()) }
                }
                Err(error) => error_decision(policy.failure_policy, evaluation_error(expression, &error)),
            }
        })
        .collect()
}

/// The error of a denied request (`admission.NewForbidden` with the decision's reason and code).
fn denial(request: &Request<'_>, policy: &str, binding: &str, message: &str, reason: &str) -> ApiError {
    let message = format!("ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {message}");
    let resource = if request.group.is_empty() {
        request.resource.to_owned()
    } else {
        format!("{}.{}", request.resource, request.group)
    };
    let full = if request.name.is_empty() {
        format!("{resource} is forbidden: {message}")
    } else {
        format!("{resource} \"{}\" is forbidden: {message}", request.name)
    };
    let reason = if reason.is_empty() { "Invalid" } else { reason };
    let code = match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    };
    let mut error = ApiError::new(code, reason, full);
    error.details.name = Some(request.name.to_owned());
    error.details.group = (!request.group.is_empty()).then(|| request.group.to_owned());
    error.details.kind = Some(request.resource.to_owned());
    error.details.causes.push(Cause { reason: String::new(), message, field: None });
    error
}

/// The compiled policies of one server, rebuilt after a policy or binding changes.
#[derive(Default)]
pub struct Admission {
    policies: RwLock<Option<Arc<PolicySet>>>,
}

impl Admission {
    /// Forgets the compiled policies (called under the state lock on every write of a policy or binding).
    pub fn changed(&self) {
        *self.policies.write() = None;
    }
}
