//! Compiling one rule (cached) into a cel-rust program in the CRD rule environment ([`super::library`]), refusing
//! what cel-go's compiler refuses and cel-rust's parser lets through: references to undeclared names, namespaces
//! used other than as a function's receiver, and the functions new rules of a 1.33 server may not call.

use super::library::ENVIRONMENT;
use cel::Program;
use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// Compiled programs by source, so that a rule is parsed once, not on every request.
static CACHE: LazyLock<Mutex<HashMap<String, Compiled>>> = LazyLock::new(Default::default);

/// A compiled program, or the detail of why it does not compile.
type Compiled = Result<Arc<Program>, String>;

/// At most this many sources are cached; the cache is emptied past it (rules change only with their CRD).
const CACHE_LIMIT: usize = 4096;

/// Names an expression may use besides its comprehension variables: the two variables and the type names cel-go
/// resolves (`int(x)`, `type(x) == string`).
const GLOBALS: [&str; 13] =
    ["self", "oldSelf", "int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type", "dyn"];

/// Namespaces of functions (`lists.range(3)`, `ip.isCanonical(s)`, `format.named(n)`): a name only as the receiver
/// of a call, which cel-go resolves as one qualified function name.
pub const NAMESPACES: [&str; 8] = ["lists", "math", "strings", "optional", "cel", "ip", "format", "sets"];

/// Functions of the base environment that new rules of a 1.33 server may not call: the semver library is in the
/// 1.33 environment, but a new rule is compiled in `DefaultCompatibilityVersion` (1.32), where cel-go reports
/// `undeclared reference to 'isSemver'` (`staging/src/k8s.io/apiserver/pkg/cel/environment/base.go`). The
/// library's other functions are methods of the values these make.
const UNDECLARED_FUNCTIONS: [&str; 2] = ["semver", "isSemver"];

/// Compiles `source` (cached): the program, or the detail upstream prints after `compilation failed: `.
pub fn program(source: &str) -> Result<Arc<Program>, String> {
    if let Some(found) = CACHE.lock().get(source) {
        return found.clone();
    }
    let compiled = compile_uncached(source);
    let mut cache = CACHE.lock();
    if cache.len() >= CACHE_LIMIT {
        cache.clear();
    }
    cache.insert(source.to_owned(), compiled.clone());
    compiled
}

fn compile_uncached(source: &str) -> Result<Arc<Program>, String> {
    // cel-rust prints a parse error's source line as `\n| line`, cel-go as `\n | line`.
    let program = ENVIRONMENT.compile(source).map_err(|e| e.to_string().replace("\n| ", "\n | "))?;
    let mut scope = Vec::new();
    if let Some(id) = undeclared(program.expression(), &mut scope) {
        let (name, expression_id) = id;
        let mut start = program.source_info().offset_for(expression_id).map_or(0, |(start, _)| start as usize);
        // cel-go places a global call at its `(`.
        if UNDECLARED_FUNCTIONS.contains(&name)
            && source.get(start..).is_some_and(|rest| rest.starts_with(name) && rest[name.len()..].starts_with('('))
        {
            start += name.len();
        }
        let before = source.get(..start).unwrap_or_default();
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        let snippet = source.lines().nth(line - 1).unwrap_or_default();
        let pointer = format!("{:.>width$}", "^", width = column);
        return Err(format!(
            "ERROR: <input>:{line}:{column}: undeclared reference to '{name}' (in container '')\n | {snippet}\n | {pointer}"
        ));
    }
    Ok(Arc::new(program))
}

/// The first identifier that is neither a comprehension variable in scope nor a global, with its node id.
fn undeclared<'e>(expression: &'e IdedExpr, scope: &mut Vec<&'e str>) -> Option<(&'e str, u64)> {
    match &expression.expr {
        Expr::Ident(name) => {
            let known = name.starts_with('@') || scope.contains(&name.as_str()) || GLOBALS.contains(&name.as_str());
            (!known).then_some((name.as_str(), expression.id))
        }
        Expr::Call(call) if call.target.is_none() && UNDECLARED_FUNCTIONS.contains(&call.func_name.as_str()) => {
            Some((call.func_name.as_str(), expression.id))
        }
        Expr::Call(call) => {
            let namespace = matches!(call.target.as_deref(), Some(IdedExpr { expr: Expr::Ident(name), .. })
                if NAMESPACES.contains(&name.as_str()) && !scope.contains(&name.as_str()));
            call.target
                .as_deref()
                .filter(|_| !namespace)
                .and_then(|t| undeclared(t, scope))
                .or_else(|| call.args.iter().find_map(|a| undeclared(a, scope)))
        }
        Expr::Comprehension(c) => {
            if let Some(found) = undeclared(&c.iter_range, scope).or_else(|| undeclared(&c.accu_init, scope)) {
                return Some(found);
            }
            let depth = scope.len();
            scope.push(&c.iter_var);
            if let Some(second) = &c.iter_var2 {
                scope.push(second);
            }
            scope.push(&c.accu_var);
            let found = [&c.loop_cond, &c.loop_step, &c.result].into_iter().find_map(|e| undeclared(e, scope));
            scope.truncate(depth);
            found
        }
        Expr::List(list) => list.elements.iter().find_map(|e| undeclared(e, scope)),
        Expr::Map(map) => map.entries.iter().find_map(|entry| match &entry.expr {
            EntryExpr::StructField(field) => undeclared(&field.value, scope),
            EntryExpr::MapEntry(e) => undeclared(&e.key, scope).or_else(|| undeclared(&e.value, scope)),
        }),
        Expr::Struct(s) => s.entries.iter().find_map(|entry| match &entry.expr {
            EntryExpr::StructField(field) => undeclared(&field.value, scope),
            EntryExpr::MapEntry(e) => undeclared(&e.key, scope).or_else(|| undeclared(&e.value, scope)),
        }),
        Expr::Select(select) => undeclared(&select.operand, scope),
        Expr::Literal(_) | Expr::Unspecified => None,
    }
}

/// Whether `program` reads `oldSelf` (a transition rule).
pub fn uses_old_self(program: &Program) -> bool {
    program.references().has_variable("oldSelf")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_and_undeclared_names_are_compile_errors() {
        let error = program("self.a ==").unwrap_err();
        assert!(error.starts_with("ERROR: <input>:1:"), "{error}");
        assert_eq!(
            program("self.a == other").unwrap_err(),
            "ERROR: <input>:1:11: undeclared reference to 'other' (in container '')\n | self.a == other\n | ..........^"
        );
        assert!(program("self.all(x, x > 0) && self.exists(y, y == 1) && self.map(z, z * 2) == [2]").is_ok());
        assert!(program("int(self.a) == 1 && lists.range(2) == [0, 1] && self == oldSelf").is_ok());
    }

    #[test]
    fn namespaces_are_only_function_receivers_and_semver_is_not_declared_for_new_rules() {
        assert!(program("ip.isCanonical(self.a) && format.named('uri').hasValue() && lists.range(1) == [0]").is_ok());
        assert!(program("self.all(ip, ip.startsWith('1'))").is_ok());
        assert_eq!(
            program("format == 1").unwrap_err(),
            "ERROR: <input>:1:1: undeclared reference to 'format' (in container '')\n | format == 1\n | ^"
        );
        // cel-go points at the call's `(`.
        assert_eq!(
            program("isSemver(self.v)").unwrap_err(),
            "ERROR: <input>:1:9: undeclared reference to 'isSemver' (in container '')\n | isSemver(self.v)\n | ........^"
        );
        assert!(program("self.v == 'x' || semver(self.v).major() == 1").unwrap_err().contains("'semver'"));
    }
}
