//! The Kubernetes quantity library of CEL (kubernetes/kubernetes `staging/src/k8s.io/apiserver/pkg/cel/library/
//! quantity.go`): `quantity(string)`, `isQuantity(string)` and the methods `sign`, `isInteger`, `asInteger`,
//! `asApproximateFloat`, `compareTo`, `isGreaterThan`, `isLessThan`, `add` and `sub` (with a quantity or an int).
//!
//! A quantity is held exactly as `digits × 10^scale` (binary suffixes multiplied out), normalized so that equal
//! amounts are equal values (`quantity('1k') == quantity('1000')`). Parsing follows `resource.ParseQuantity`:
//! a signed decimal number, then a binary suffix (`Ki`…`Ei`), a decimal one (`n`, `u`, `m`, `k`, `M`…`E`) or an
//! exponent (`e3`, `E-2`).

use super::call::values;
use cel::common::types::{DYN_TYPE, STRING_TYPE};
use cel::common::value::CowVal;
use cel::extractors::IntoResolveResult;
use cel::objects::Opaque;
use cel::{Env, ExecutionError, Value};
use std::cmp::Ordering;
use std::sync::Arc;

/// An exact quantity: `digits × 10^scale`, with no trailing zero in `digits` (zero has scale 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    digits: i128,
    scale: i32,
}

impl Opaque for Quantity {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

impl Quantity {
    fn new(mut digits: i128, mut scale: i32) -> Quantity {
        if digits == 0 {
            return Quantity { digits: 0, scale: 0 };
        }
        while digits % 10 == 0 {
            digits /= 10;
            scale += 1;
        }
        Quantity { digits, scale }
    }

    /// Parses a quantity as `resource.ParseQuantity` accepts it.
    pub fn parse(text: &str) -> Option<Quantity> {
        let number_end =
            text.find(|c: char| !(c.is_ascii_digit() || matches!(c, '+' | '-' | '.'))).unwrap_or(text.len());
        let (number, suffix) = text.split_at(number_end);
        let unsigned = number.strip_prefix(['+', '-']).unwrap_or(number);
        let negative = number.starts_with('-');
        let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
        if (whole.is_empty() && fraction.is_empty())
            || !(whole.chars().chain(fraction.chars()).all(|c| c.is_ascii_digit()))
        {
            return None;
        }
        let mut digits: i128 = format!("{whole}{fraction}").parse().ok()?;
        let mut scale = -(fraction.len() as i32);
        let binary = |power: u32| 1i128.checked_shl(10 * power);
        match suffix {
            "" => {}
            "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
                let power = "KMGTPE".find(&suffix[..1])? as u32 + 1;
                digits = digits.checked_mul(binary(power)?)?;
            }
            "n" => scale -= 9,
            "u" => scale -= 6,
            "m" => scale -= 3,
            "k" => scale += 3,
            "M" => scale += 6,
            "G" => scale += 9,
            "T" => scale += 12,
            "P" => scale += 15,
            "E" => scale += 18,
            exponent => {
                let rest = exponent.strip_prefix(['e', 'E'])?;
                let value: i32 = rest.parse().ok()?;
                scale = scale.checked_add(value)?;
            }
        }
        if negative {
            digits = -digits;
        }
        Some(Quantity::new(digits, scale))
    }

    fn sign(&self) -> i64 {
        self.digits.signum() as i64
    }

    fn as_integer(&self) -> Option<i64> {
        if self.scale < 0 {
            return None;
        }
        let factor = 10i128.checked_pow(self.scale as u32)?;
        i64::try_from(self.digits.checked_mul(factor)?).ok()
    }

    fn as_float(&self) -> f64 {
        self.digits as f64 * 10f64.powi(self.scale)
    }

    /// Both as digits at the smaller scale, if that fits.
    fn aligned(&self, other: &Quantity) -> Option<(i128, i128, i32)> {
        let scale = self.scale.min(other.scale);
        let up = |q: &Quantity| q.digits.checked_mul(10i128.checked_pow((q.scale - scale) as u32)?);
        Some((up(self)?, up(other)?, scale))
    }

    fn compare(&self, other: &Quantity) -> Ordering {
        match self.aligned(other) {
            Some((a, b, _)) => a.cmp(&b),
            None => self.as_float().partial_cmp(&other.as_float()).unwrap_or(Ordering::Equal),
        }
    }

    fn plus(&self, other: &Quantity, negate: bool) -> Option<Quantity> {
        let (a, b, scale) = self.aligned(other)?;
        let b = if negate { b.checked_neg()? } else { b };
        Some(Quantity::new(a.checked_add(b)?, scale))
    }
}

/// Registers the library on `env`.
pub fn register(env: &mut Env) -> Result<(), cel::DeclarationError> {
    env.add_overload("quantity", "string_to_quantity", vec![STRING_TYPE], to_quantity)?;
    env.add_overload("isQuantity", "is_quantity_string", vec![STRING_TYPE], is_quantity)?;
    env.add_member_overload("sign", "quantity_sign", DYN_TYPE, vec![], sign)?;
    env.add_member_overload("isInteger", "quantity_is_integer", DYN_TYPE, vec![], is_integer)?;
    env.add_member_overload("asInteger", "quantity_as_integer", DYN_TYPE, vec![], as_integer)?;
    env.add_member_overload("asApproximateFloat", "quantity_as_float", DYN_TYPE, vec![], as_float)?;
    env.add_member_overload("compareTo", "quantity_compare_to", DYN_TYPE, vec![DYN_TYPE], compare_to)?;
    env.add_member_overload("isGreaterThan", "quantity_greater_than", DYN_TYPE, vec![DYN_TYPE], greater)?;
    env.add_member_overload("isLessThan", "quantity_less_than", DYN_TYPE, vec![DYN_TYPE], less)?;
    env.add_member_overload("add", "quantity_add", DYN_TYPE, vec![DYN_TYPE], add)?;
    env.add_member_overload("sub", "quantity_sub", DYN_TYPE, vec![DYN_TYPE], sub)?;
    Ok(())
}

fn error(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

/// The receiver: a quantity only.
fn quantity_of(value: &Value, function: &str) -> Result<Quantity, ExecutionError> {
    match value {
        Value::Opaque(opaque) => {
            opaque.downcast_ref::<Quantity>().copied().ok_or_else(|| error(function, "no such overload"))
        }
        _ => Err(error(function, "no such overload")),
    }
}

/// The argument of `add`/`sub`/comparisons: a quantity, or an int for `add` and `sub`.
fn operand(value: &Value, function: &str) -> Result<Quantity, ExecutionError> {
    match value {
        Value::Int(i) if matches!(function, "add" | "sub") => Ok(Quantity::new(i128::from(*i), 0)),
        other => quantity_of(other, function),
    }
}

fn opaque<'b, 'v>(quantity: Quantity) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Value::Opaque(Arc::new(quantity)).into_resolve_result()
}

fn to_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let args = values(&args)?;
    let Some(Value::String(text)) = args.first() else { return Err(error("quantity", "no such overload")) };
    match Quantity::parse(text) {
        Some(q) => opaque(q),
        None => Err(error(
            "quantity",
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        )),
    }
}

fn is_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let args = values(&args)?;
    let valid = matches!(args.first(), Some(Value::String(text)) if Quantity::parse(text).is_some());
    Value::Bool(valid).into_resolve_result()
}

fn sign<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let q = quantity_of(&values(&args)?[0], "sign")?;
    Value::Int(q.sign()).into_resolve_result()
}

fn is_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let q = quantity_of(&values(&args)?[0], "isInteger")?;
    Value::Bool(q.as_integer().is_some()).into_resolve_result()
}

fn as_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let q = quantity_of(&values(&args)?[0], "asInteger")?;
    match q.as_integer() {
        Some(i) => Value::Int(i).into_resolve_result(),
        None => Err(error("asInteger", "cannot convert value to integer")),
    }
}

fn as_float<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let q = quantity_of(&values(&args)?[0], "asApproximateFloat")?;
    Value::Float(q.as_float()).into_resolve_result()
}

fn pair(args: Vec<CowVal<'_, '_>>, function: &str) -> Result<(Quantity, Quantity), ExecutionError> {
    let args = values(&args)?;
    let first = quantity_of(&args[0], function)?;
    let second = args.get(1).ok_or_else(|| error(function, "no such overload"))?;
    Ok((first, operand(second, function)?))
}

fn compare_to<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = pair(args, "compareTo")?;
    Value::Int(a.compare(&b) as i64).into_resolve_result()
}

fn greater<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = pair(args, "isGreaterThan")?;
    Value::Bool(a.compare(&b) == Ordering::Greater).into_resolve_result()
}

fn less<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = pair(args, "isLessThan")?;
    Value::Bool(a.compare(&b) == Ordering::Less).into_resolve_result()
}

fn add<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = pair(args, "add")?;
    opaque(a.plus(&b, false).ok_or_else(|| error("add", "quantity overflow"))?)
}

fn sub<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = pair(args, "sub")?;
    opaque(a.plus(&b, true).ok_or_else(|| error("sub", "quantity overflow"))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_as_parse_quantity_does() {
        assert_eq!(Quantity::parse("1k"), Quantity::parse("1000"));
        assert_eq!(Quantity::parse("1Ki").and_then(|q| q.as_integer()), Some(1024));
        assert_eq!(Quantity::parse("1.5Gi").and_then(|q| q.as_integer()), Some(1_610_612_736));
        assert_eq!(Quantity::parse("500m").map(|q| q.as_float()), Some(0.5));
        assert_eq!(Quantity::parse("-2e3").and_then(|q| q.as_integer()), Some(-2000));
        for bad in ["", "abc", "1Ki2", "1..2", "1kk", "e3"] {
            assert_eq!(Quantity::parse(bad), None, "{bad}");
        }
    }
}
