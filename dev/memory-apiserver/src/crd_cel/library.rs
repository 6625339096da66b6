//! The CEL environment of CRD validation rules: cel-rust's standard library and macros, its strings, lists and
//! math extensions, and the Kubernetes libraries cel-rust lacks, registered as functions.
//!
//! Checked against kubernetes/kubernetes `staging/src/k8s.io/apiserver/pkg/cel/library/lists.go` (`isSorted`,
//! `sum`, `min`, `max`, `indexOf`, `lastIndexOf`) and `regex.go` (`find`, `findAll`); `quantity.go` is
//! [`super::quantity`], `urls.go` [`super::url`], `ip.go` and `cidr.go` [`super::ip`], `format.go`
//! [`super::format`]; cel-go's `ext/sets.go` is [`sets`]. Which libraries a CRD rule may use is `staging/src/k8s.io/apiserver/pkg/cel/environment/
//! base.go`: URLs, regex and lists always, quantity since 1.28, sets since 1.29, IP and CIDR since 1.30, format since 1.31, semver
//! since 1.33. A new rule is compiled in the environment of the previous minor version
//! (`DefaultCompatibilityVersion`), so on the 1.33 the dev server reports, semver is not declared for it
//! ([`super::compile`] refuses such a rule as cel-go does); it is not implemented here.

use super::call::values;
use cel::common::types::{INT_TYPE, LIST_TYPE, STRING_TYPE};
use cel::common::value::CowVal;
use cel::extractors::IntoResolveResult;
use cel::{Env, ExecutionError, Value};
use std::cmp::Ordering;
use std::sync::{Arc, LazyLock};

/// A cel-rust extension library.
type Extension = fn(&mut Env) -> Result<(), cel::DeclarationError>;

/// The environment every CRD rule is compiled and run in.
pub static ENVIRONMENT: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    let extensions: [(&str, Extension); 9] = [
        ("strings", cel::extensions::strings),
        ("lists", cel::extensions::lists),
        ("math", cel::extensions::math),
        ("kubernetes lists and regex", kubernetes),
        ("kubernetes quantity", super::quantity::register),
        ("kubernetes urls", super::url::register),
        ("kubernetes ip and cidr", super::ip::register),
        ("kubernetes format", super::format::register),
        ("sets", sets),
    ];
    for (name, extension) in extensions {
        if let Err(error) = env.add_extension(extension) {
            tracing::error!(%error, name, "a CEL library failed to register");
        }
    }
    Arc::new(env)
});

/// The Kubernetes list and regex functions.
fn kubernetes(env: &mut Env) -> Result<(), cel::DeclarationError> {
    env.add_member_overload("isSorted", "list_is_sorted", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], max)?;
    env.add_member_overload("indexOf", "list_index_of", LIST_TYPE, vec![cel::common::types::DYN_TYPE], index_of)?;
    env.add_member_overload(
        "lastIndexOf",
        "list_last_index_of",
        LIST_TYPE,
        vec![cel::common::types::DYN_TYPE],
        last_index_of,
    )?;
    env.add_member_overload("find", "string_find_string", STRING_TYPE, vec![STRING_TYPE], find)?;
    env.add_member_overload("findAll", "string_find_all_string", STRING_TYPE, vec![STRING_TYPE], find_all)?;
    env.add_member_overload(
        "findAll",
        "string_find_all_string_int",
        STRING_TYPE,
        vec![STRING_TYPE, INT_TYPE],
        find_all_limited,
    )?;
    Ok(())
}

/// cel-go's `ext.Sets` (google/cel-go `ext/sets.go`; in the CRD environment since 1.29): `sets.contains(a, b)`
/// (every element of `b` is in `a`), `sets.equivalent(a, b)` (each contains the other), `sets.intersects(a, b)`
/// (an element in both), with CEL equality (`1 == 1.0`).
fn sets(env: &mut Env) -> Result<(), cel::DeclarationError> {
    env.add_overload("sets.contains", "list_sets_contains_list", vec![LIST_TYPE, LIST_TYPE], sets_contains)?;
    env.add_overload("sets.equivalent", "list_sets_equivalent_list", vec![LIST_TYPE, LIST_TYPE], sets_equivalent)?;
    env.add_overload("sets.intersects", "list_sets_intersects_list", vec![LIST_TYPE, LIST_TYPE], sets_intersects)?;
    Ok(())
}

/// The two list arguments of a `sets` function.
type ListPair = (Arc<Vec<Value>>, Arc<Vec<Value>>);

fn two_lists(args: &[CowVal<'_, '_>], function: &str) -> Result<ListPair, ExecutionError> {
    let args = values(args)?;
    match (args.first(), args.get(1)) {
        (Some(a), Some(b)) => Ok((list(a, function)?, list(b, function)?)),
        _ => Err(ExecutionError::function_error(function, "no such overload")),
    }
}

fn contains_all(a: &[Value], b: &[Value]) -> bool {
    b.iter().all(|x| a.contains(x))
}

fn sets_contains<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(&args, "sets.contains")?;
    Value::Bool(contains_all(&a, &b)).into_resolve_result()
}

fn sets_equivalent<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(&args, "sets.equivalent")?;
    Value::Bool(contains_all(&a, &b) && contains_all(&b, &a)).into_resolve_result()
}

fn sets_intersects<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_lists(&args, "sets.intersects")?;
    Value::Bool(a.iter().any(|x| b.contains(x))).into_resolve_result()
}

fn list(value: &Value, function: &str) -> Result<Arc<Vec<Value>>, ExecutionError> {
    match value {
        Value::List(items) => Ok(items.clone()),
        other => Err(ExecutionError::function_error(function, format!("not a list: {other:?}"))),
    }
}

fn string<'a>(value: &'a Value, function: &str) -> Result<&'a str, ExecutionError> {
    match value {
        Value::String(s) => Ok(s.as_str()),
        other => Err(ExecutionError::function_error(function, format!("not a string: {other:?}"))),
    }
}

fn compare(a: &Value, b: &Value, function: &str) -> Result<Ordering, ExecutionError> {
    a.partial_cmp(b).ok_or_else(|| ExecutionError::function_error(function, "no such overload"))
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let args = values(&args)?;
    let items = list(&args[0], "isSorted")?;
    for pair in items.windows(2) {
        if compare(&pair[0], &pair[1], "isSorted")? == Ordering::Greater {
            return Value::Bool(false).into_resolve_result();
        }
    }
    Value::Bool(true).into_resolve_result()
}

fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let args = values(&args)?;
    let items = list(&args[0], "sum")?;
    let mut total: Option<Value> = None;
    for item in items.iter() {
        total = Some(match total {
            None => item.clone(),
            Some(sum) => (sum + item.clone())?,
        });
    }
    // lists.go: the sum of an empty list is the zero of its element type; an untyped list here is `int`.
    total.unwrap_or(Value::Int(0)).into_resolve_result()
}

fn extreme<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    function: &str,
    wanted: Ordering,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let args = values(&args)?;
    let items = list(&args[0], function)?;
    let mut best: Option<&Value> = None;
    for item in items.iter() {
        best = match best {
            Some(current) if compare(item, current, function)? != wanted => Some(current),
            _ => Some(item),
        };
    }
    match best {
        Some(value) => value.clone().into_resolve_result(),
        None => Err(ExecutionError::function_error(function, format!("{function} called on empty list"))),
    }
}

fn min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "min", Ordering::Less)
}

fn max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "max", Ordering::Greater)
}

fn position<'b, 'v>(args: Vec<CowVal<'b, 'v>>, last: bool) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let args = values(&args)?;
    let items = list(&args[0], "indexOf")?;
    let found = if last {
        items.iter().rposition(|item| *item == args[1])
    } else {
        items.iter().position(|item| *item == args[1])
    };
    Value::Int(found.map_or(-1, |i| i as i64)).into_resolve_result()
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position(args, false)
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    position(args, true)
}

fn regex(pattern: &str, function: &str) -> Result<regex::Regex, ExecutionError> {
    regex::Regex::new(pattern).map_err(|e| ExecutionError::function_error(function, e))
}

fn find<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let args = values(&args)?;
    let re = regex(string(&args[1], "find")?, "find")?;
    let text = string(&args[0], "find")?;
    Value::from(re.find(text).map_or("", |m| m.as_str())).into_resolve_result()
}

fn find_all_up_to<'b, 'v>(args: &[Value], limit: Option<i64>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let re = regex(string(&args[1], "findAll")?, "findAll")?;
    let text = string(&args[0], "findAll")?;
    // regex.go: a negative limit means all matches, zero none.
    let limit = match limit {
        Some(n) if n >= 0 => n as usize,
        _ => usize::MAX,
    };
    let found: Vec<Value> = re.find_iter(text).take(limit).map(|m| Value::from(m.as_str())).collect();
    Value::List(Arc::new(found)).into_resolve_result()
}

fn find_all<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    find_all_up_to(&values(&args)?, None)
}

fn find_all_limited<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let args = values(&args)?;
    let limit = match args.get(2) {
        Some(Value::Int(n)) => *n,
        _ => return Err(ExecutionError::function_error("findAll", "the limit must be an int")),
    };
    find_all_up_to(&args, Some(limit))
}
