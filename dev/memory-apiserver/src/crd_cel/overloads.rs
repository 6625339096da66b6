//! The operator type errors of a CRD rule its schema shows: an operator applied to operands whose types the schema
//! (or a literal) fixes and that no overload of it takes. cel-go's checker reports `found no matching overload for
//! '_==_' applied to '(string, int)'` at the operator (google/cel-go `checker/errors.go` `noMatchingOverload`, with
//! `formatFunctionDeclType`; the parser gives a call the id of its operator token, `parser/parser.go`), and the API
//! server refuses the rule (`staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/compilation.go`).
//!
//! The overloads are cel-go's standard declarations (`common/stdlib/standard.go`):
//! - `_==_`, `_!=_`: `(A, A)`: both sides one type; `int`, `uint` and `double` do not unify;
//! - `_<_`, `_<=_`, `_>_`, `_>=_`: `bool`, `string`, `bytes` with themselves, the numbers with each other (whether
//!   or not the cross-type numeric overloads are enabled, a number against a number is not flagged here);
//! - `_+_`: `int`, `uint`, `double`, `string`, `bytes`, lists with themselves; `_-_`, `_*_`, `_/_`: the numbers with
//!   themselves; `_%_`: `int`, `uint`; `-_`: `int`, `double`;
//! - `!_`, `_&&_`, `_||_`: `bool`.
//!
//! Only what is certain and whose message is certain: every operand's type must be known, and printable as cel-go
//! prints it. A schema type maps as `staging/src/k8s.io/apiserver/pkg/cel/common/schemas.go` `SchemaDeclType` maps
//! it: `integer` int, `number` double, `string` string, `boolean` bool, `array` list, `object` with
//! `additionalProperties` a map. Open (never flagged): `x-kubernetes-int-or-string`, no type,
//! `x-kubernetes-preserve-unknown-fields`, an embedded resource, a string with a `format` (a timestamp, duration or
//! bytes upstream), `null`, functions, `metadata` below a resource's root, and an object with properties (upstream
//! names its type after a generated name, `selfType...`): a list of such objects too.

use super::checker::Checker;
use cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use serde_json::Value;

/// A known type, by the name cel-go prints; `kind` is the name without element types.
#[derive(Clone, Debug, PartialEq)]
struct Ty {
    kind: &'static str,
    name: String,
}

impl Ty {
    fn simple(kind: &'static str) -> Ty {
        Ty { kind, name: kind.to_owned() }
    }

    fn number(&self) -> bool {
        matches!(self.kind, "int" | "uint" | "double")
    }
}

/// The first operator applied to operands no overload of it takes: the call's id and cel-go's message.
pub(super) fn first(checker: &Checker<'_>, e: &IdedExpr) -> Option<(u64, String)> {
    Types { checker: checker.clone(), accumulators: Vec::new() }.first(e)
}

#[derive(Clone)]
struct Types<'s> {
    checker: Checker<'s>,
    accumulators: Vec<(String, Option<Ty>)>,
}

fn text<'a>(schema: &'a Value, key: &str) -> Option<&'a str> {
    schema.get(key).and_then(Value::as_str)
}

/// The type of a schema node, `None` when it is open.
fn schema_type(node: &Value) -> Option<Ty> {
    let flag = |key: &str| node.get(key).and_then(Value::as_bool) == Some(true);
    if flag("x-kubernetes-int-or-string")
        || flag("x-kubernetes-preserve-unknown-fields")
        || flag("x-kubernetes-embedded-resource")
    {
        return None;
    }
    Some(match text(node, "type")? {
        "string" if node.get("format").is_some() => return None,
        "string" => Ty::simple("string"),
        "integer" => Ty::simple("int"),
        "number" => Ty::simple("double"),
        "boolean" => Ty::simple("bool"),
        "array" => Ty { kind: "list", name: format!("list({})", schema_type(node.get("items")?)?.name) },
        "object" => {
            let values = schema_type(node.get("additionalProperties").filter(|a| a.is_object())?)?;
            Ty { kind: "map", name: format!("map(string, {})", values.name) }
        }
        _ => return None,
    })
}

impl<'s> Types<'s> {
    fn type_of(&self, e: &IdedExpr) -> Option<Ty> {
        if let Expr::Ident(name) = &e.expr
            && let Some((_, ty)) = self.accumulators.iter().rev().find(|(n, _)| n == name)
        {
            return ty.clone();
        }
        if let Some((node, root)) = self.checker.reach(e) {
            return if root { None } else { schema_type(node) };
        }
        match &e.expr {
            Expr::Literal(literal) => Some(Ty::simple(match literal {
                LiteralValue::Boolean(_) => "bool",
                LiteralValue::Int(_) => "int",
                LiteralValue::UInt(_) => "uint",
                LiteralValue::Double(_) => "double",
                LiteralValue::String(_) => "string",
                LiteralValue::Bytes(_) => "bytes",
                LiteralValue::Null => return None,
            })),
            Expr::Select(select) if select.test => Some(Ty::simple("bool")),
            Expr::Comprehension(c) => self.inside(c).type_of(&c.result),
            Expr::Call(call) if call.target.is_none() => {
                let operand = |i: usize| call.args.get(i).and_then(|a| self.type_of(a));
                match call.func_name.as_str() {
                    "_==_"
                    | "_!=_"
                    | "_<_"
                    | "_<=_"
                    | "_>_"
                    | "_>=_"
                    | "!_"
                    | "_&&_"
                    | "_||_"
                    | "@in"
                    | "@not_strictly_false" => Some(Ty::simple("bool")),
                    "_+_" | "_-_" | "_*_" | "_/_" | "_%_" => {
                        let (a, b) = (operand(0)?, operand(1)?);
                        (a == b).then_some(a)
                    }
                    "-_" => operand(0),
                    "_?_:_" => {
                        let (a, b) = (operand(1)?, operand(2)?);
                        (a == b).then_some(a)
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn inside(&self, c: &ComprehensionExpr) -> Types<'s> {
        let mut inner = self.clone();
        inner.checker = self.checker.enter(c);
        inner.accumulators.push((c.accu_var.clone(), self.type_of(&c.accu_init)));
        inner
    }

    fn first(&self, e: &IdedExpr) -> Option<(u64, String)> {
        match &e.expr {
            Expr::Select(select) => self.first(&select.operand),
            Expr::Call(call) => {
                let found = call.target.iter().map(|t| &**t).chain(&call.args).find_map(|a| self.first(a));
                found.or_else(|| {
                    if call.target.is_some() {
                        return None;
                    }
                    self.refused(&call.func_name, &call.args).map(|message| (e.id, message))
                })
            }
            Expr::Comprehension(c) => self.first(&c.iter_range).or_else(|| self.first(&c.accu_init)).or_else(|| {
                let inner = self.inside(c);
                [&c.loop_cond, &c.loop_step, &c.result].into_iter().find_map(|part| inner.first(part))
            }),
            Expr::List(list) => list.elements.iter().find_map(|x| self.first(x)),
            Expr::Map(map) => map.entries.iter().find_map(|entry| self.entry(&entry.expr)),
            Expr::Struct(s) => s.entries.iter().find_map(|entry| self.entry(&entry.expr)),
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => None,
        }
    }

    fn entry(&self, entry: &EntryExpr) -> Option<(u64, String)> {
        match entry {
            EntryExpr::StructField(field) => self.first(&field.value),
            EntryExpr::MapEntry(e) => self.first(&e.key).or_else(|| self.first(&e.value)),
        }
    }

    /// cel-go's message when no overload of the operator `function` takes `args`, every one of a known type.
    fn refused(&self, function: &str, args: &[IdedExpr]) -> Option<String> {
        let types: Vec<Ty> = args.iter().map(|a| self.type_of(a)).collect::<Option<_>>()?;
        let refused = match (function, types.as_slice()) {
            ("_==_" | "_!=_", [a, b]) => a.kind != b.kind,
            ("_<_" | "_<=_" | "_>_" | "_>=_", [a, b]) => {
                !((a.kind == b.kind && matches!(a.kind, "bool" | "string" | "bytes")) || (a.number() && b.number()))
            }
            ("_+_", [a, b]) => a.kind != b.kind || matches!(a.kind, "bool" | "map"),
            ("_-_" | "_*_" | "_/_", [a, b]) => a.kind != b.kind || !a.number(),
            ("_%_", [a, b]) => a.kind != b.kind || !matches!(a.kind, "int" | "uint"),
            ("-_", [a]) => !matches!(a.kind, "int" | "double"),
            ("!_" | "_&&_" | "_||_", _) => types.iter().any(|t| t.kind != "bool"),
            _ => false,
        };
        let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
        refused.then(|| format!("found no matching overload for '{function}' applied to '({})'", names.join(", ")))
    }
}
