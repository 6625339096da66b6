//! CEL as ValidatingAdmissionPolicy uses it: the cel-rust interpreter with the standard library, the macros and
//! the strings, lists and math extensions, over JSON-shaped variables.
//!
//! # Assumptions
//! - There is no type checker (cel-rust has none): a policy's expressions are parsed when it is written, and type
//!   errors surface when they are evaluated, as runtime errors that `failurePolicy` governs. Upstream refuses some
//!   such policies at write time instead.

use cel::{Context, Env, Program};
use serde_json::Value;
use std::sync::{Arc, LazyLock};

/// A cel-rust extension library.
type Extension = fn(&mut Env) -> Result<(), cel::DeclarationError>;

/// The environment every policy expression is compiled and run in.
static ENVIRONMENT: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    let extensions: [(&str, Extension); 3] =
        [("strings", cel::extensions::strings), ("lists", cel::extensions::lists), ("math", cel::extensions::math)];
    for (name, extension) in extensions {
        if let Err(error) = env.add_extension(extension) {
            tracing::error!(%error, name, "a CEL extension failed to register");
        }
    }
    Arc::new(env)
});

/// A compiled expression and its source.
#[derive(Clone)]
pub struct Expression {
    /// The source text.
    pub source: String,
    program: Arc<Program>,
    /// The top-level variables it reads (`object`, `oldObject`, `request`, `variables`, `namespaceObject`).
    reads: Reads,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expression").field("source", &self.source).finish()
    }
}

/// Which inputs an expression reads, so that only those are converted to CEL values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reads {
    /// `object`.
    pub object: bool,
    /// `oldObject`.
    pub old_object: bool,
    /// `request`.
    pub request: bool,
    /// `variables`.
    pub variables: bool,
    /// `namespaceObject`.
    pub namespace_object: bool,
}

impl Reads {
    /// Both sets.
    pub fn union(self, other: Reads) -> Reads {
        Reads {
            object: self.object || other.object,
            old_object: self.old_object || other.old_object,
            request: self.request || other.request,
            variables: self.variables || other.variables,
            namespace_object: self.namespace_object || other.namespace_object,
        }
    }
}

/// The result of one evaluation.
pub type Outcome = Result<cel::Value, String>;

impl Expression {
    /// Parses `source` (the message is the parser's).
    pub fn compile(source: &str) -> Result<Expression, String> {
        let program = ENVIRONMENT.compile(source).map_err(|e| e.to_string())?;
        let references = program.references();
        let reads = Reads {
            object: references.has_variable("object"),
            old_object: references.has_variable("oldObject"),
            request: references.has_variable("request"),
            variables: references.has_variable("variables"),
            namespace_object: references.has_variable("namespaceObject"),
        };
        Ok(Expression { source: source.to_owned(), program: Arc::new(program), reads })
    }

    /// What it reads.
    pub fn reads(&self) -> Reads {
        self.reads
    }

    /// Evaluates it over `inputs`.
    pub fn evaluate(&self, inputs: &Inputs) -> Outcome {
        let mut context = Context::with_env(ENVIRONMENT.clone());
        for (name, value) in &inputs.values {
            context.add_variable_from_value(*name, value.clone());
        }
        self.program.execute(&context).map_err(|e| e.to_string())
    }

    /// Evaluates it as a condition: true, false, or an error (also for a non-boolean result).
    pub fn condition(&self, inputs: &Inputs) -> Result<bool, String> {
        match self.evaluate(inputs)? {
            cel::Value::Bool(b) => Ok(b),
            other => Err(format!("expression '{}' resulted in a non-boolean value: {other:?}", self.source)),
        }
    }
}

/// The variables an evaluation sees, already converted.
#[derive(Default, Clone)]
pub struct Inputs {
    values: Vec<(&'static str, cel::Value)>,
}

impl Inputs {
    /// Sets a variable from JSON.
    pub fn set(&mut self, name: &'static str, value: &Value) {
        let value = to_cel(value);
        self.set_value(name, value);
    }

    /// Sets a variable.
    pub fn set_value(&mut self, name: &'static str, value: cel::Value) {
        match self.values.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.values.push((name, value)),
        }
    }
}

/// JSON as a CEL value: objects are maps with string keys, integers `int` (or `uint` past `i64`), other numbers
/// `double`.
pub fn to_cel(value: &Value) -> cel::Value {
    cel::to_value(value).unwrap_or(cel::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(source: &str, object: Value) -> Outcome {
        let mut inputs = Inputs::default();
        inputs.set("object", &object);
        Expression::compile(source).unwrap().evaluate(&inputs)
    }

    fn holds(source: &str, object: Value) -> bool {
        matches!(eval(source, object), Ok(cel::Value::Bool(true)))
    }

    #[test]
    fn the_functions_kubernetes_policies_use_are_there() {
        let node = json!({"metadata": {"name": "worker-1", "labels": {"a": "1"}, "annotations": {"k": "v"}},
            "spec": {"taints": [{"key": "t"}]}});
        assert!(holds("object.metadata.name.startsWith('worker-')", node.clone()));
        assert!(holds("object.metadata.name.endsWith('-1') && object.metadata.name.contains('ker')", node.clone()));
        assert!(holds("object.metadata.name.matches('^worker-[0-9]+$')", node.clone()));
        assert!(holds("has(object.metadata.labels) && !has(object.metadata.finalizers)", node.clone()));
        assert!(holds("object.metadata.annotations.all(k, k in ['k'])", node.clone()));
        assert!(holds("object.spec.taints.exists(t, t.key == 't')", node.clone()));
        assert!(holds("size(object.metadata.labels) == 1 && size(object.metadata.name) == 8", node.clone()));
        assert!(holds("object.metadata.labels == {'a': '1'}", node.clone()));
        assert!(holds("object.metadata.labels != {'a': '2'}", node.clone()));
        assert!(holds("'worker-1'.split('-')[0] == 'worker' && 'ABC'.lowerAscii() == 'abc'", node.clone()));
        assert!(holds("[1, 2, 3].map(x, x * 2).filter(x, x > 2) == [4, 6]", node.clone()));
        assert!(holds("object.spec == {'taints': [{'key': 't'}]}", node.clone()));
        assert!(holds("'k' in object.metadata.annotations && !('x' in object.metadata.annotations)", node));
    }

    #[test]
    fn errors_and_non_booleans_are_reported() {
        assert!(eval("object.missing.field == 1", json!({})).is_err());
        let condition = Expression::compile("object.a").unwrap();
        let mut inputs = Inputs::default();
        inputs.set("object", &json!({"a": 1}));
        assert!(condition.condition(&inputs).unwrap_err().contains("non-boolean"));
        assert!(Expression::compile("object.(").is_err());
    }

    #[test]
    fn reads_name_the_variables_used() {
        let reads = Expression::compile("request.userInfo.username == 'x' && has(oldObject.spec)").unwrap().reads();
        assert_eq!(reads, Reads { request: true, old_object: true, ..Reads::default() });
    }
}
