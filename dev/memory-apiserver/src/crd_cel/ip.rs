//! The Kubernetes IP and CIDR libraries of CEL (kubernetes/kubernetes `staging/src/k8s.io/apiserver/pkg/cel/
//! library/ip.go` and `cidr.go`, in the CRD rule environment since 1.30): `ip(string)`, `isIP(string)`,
//! `ip.isCanonical(string)`, the methods `family`, `isUnspecified`, `isLoopback`, `isLinkLocalMulticast`,
//! `isLinkLocalUnicast`, `isGlobalUnicast`, `string(ip)`; `cidr(string)`, `isCIDR(string)`, the methods
//! `containsIP` (string or IP), `containsCIDR` (string or CIDR), `ip`, `prefixLength`, `masked`, `string(cidr)`.
//!
//! Parsing is Go's `netip` ([`super::netip`]); IPv4-mapped IPv6 addresses and zones are refused, with the
//! library's own messages. As upstream, `containsIP` of a string that is no IP is `no such overload` (the parse
//! error is dropped by `MaybeNoSuchOverloadErr(cidr)`), while `containsCIDR` of a bad string reports the parse
//! error.

use super::call::{NO_SUCH_OVERLOAD, error, values};
use super::netip::{Addr, Prefix, go_quote, parse_addr, parse_prefix};
use cel::common::types::{STRING_TYPE, Type};
use cel::common::value::CowVal;
use cel::extractors::IntoResolveResult;
use cel::objects::Opaque;
use cel::{Env, ExecutionError, Value};
use std::sync::Arc;

/// An IP value (`apiservercel.IP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ip(pub Addr);

impl Opaque for Ip {
    fn runtime_type_name(&self) -> &str {
        "net.IP"
    }
}

/// A CIDR value (`apiservercel.CIDR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr(pub Prefix);

impl Opaque for Cidr {
    fn runtime_type_name(&self) -> &str {
        "net.CIDR"
    }
}

/// Registers both libraries on `env`.
pub fn register(env: &mut Env) -> Result<(), cel::DeclarationError> {
    env.add_overload("ip", "string_to_ip", vec![STRING_TYPE], to_ip)?;
    env.add_overload("isIP", "is_ip", vec![STRING_TYPE], is_ip)?;
    env.add_overload("ip.isCanonical", "ip_is_canonical", vec![STRING_TYPE], is_canonical)?;
    env.add_overload("string", "ip_to_string", vec![ip_type()], to_string)?;
    env.add_member_overload("family", "ip_family", ip_type(), vec![], family)?;
    env.add_member_overload("isUnspecified", "ip_is_unspecified", ip_type(), vec![], is_unspecified)?;
    env.add_member_overload("isLoopback", "ip_is_loopback", ip_type(), vec![], is_loopback)?;
    env.add_member_overload(
        "isLinkLocalMulticast",
        "ip_is_link_local_multicast",
        ip_type(),
        vec![],
        is_link_local_multicast,
    )?;
    env.add_member_overload(
        "isLinkLocalUnicast",
        "ip_is_link_local_unicast",
        ip_type(),
        vec![],
        is_link_local_unicast,
    )?;
    env.add_member_overload("isGlobalUnicast", "ip_is_global_unicast", ip_type(), vec![], is_global_unicast)?;
    env.add_overload("cidr", "string_to_cidr", vec![STRING_TYPE], to_cidr)?;
    env.add_overload("isCIDR", "is_cidr", vec![STRING_TYPE], is_cidr)?;
    env.add_overload("string", "cidr_to_string", vec![cidr_type()], to_string)?;
    env.add_member_overload("containsIP", "cidr_contains_ip_string", cidr_type(), vec![STRING_TYPE], contains_ip)?;
    env.add_member_overload("containsIP", "cidr_contains_ip_ip", cidr_type(), vec![ip_type()], contains_ip)?;
    env.add_member_overload(
        "containsCIDR",
        "cidr_contains_cidr_string",
        cidr_type(),
        vec![STRING_TYPE],
        contains_cidr,
    )?;
    env.add_member_overload("containsCIDR", "cidr_contains_cidr", cidr_type(), vec![cidr_type()], contains_cidr)?;
    env.add_member_overload("ip", "cidr_ip", cidr_type(), vec![], cidr_ip)?;
    env.add_member_overload("prefixLength", "cidr_prefix_length", cidr_type(), vec![], prefix_length)?;
    env.add_member_overload("masked", "cidr_masked", cidr_type(), vec![], masked)?;
    Ok(())
}

/// ip.go `parseIPAddr`: `netip.ParseAddr` without zones or IPv4-mapped IPv6 addresses.
pub fn parse_ip(raw: &str) -> Result<Addr, String> {
    let (addr, zone) = parse_addr(raw)
        .map_err(|e| format!("IP Address {} parse error during conversion from string: {e}", go_quote(raw)))?;
    if !zone.is_empty() {
        return Err(format!("IP address {} with zone value is not allowed", go_quote(raw)));
    }
    if addr.is_4in6() {
        return Err(format!("IPv4-mapped IPv6 address {} is not allowed", go_quote(raw)));
    }
    Ok(addr)
}

/// cidr.go `parseCIDR` (its message prefix is repeated by `stringToCIDR`, as upstream repeats it).
pub fn parse_cidr(raw: &str) -> Result<Prefix, String> {
    let prefix =
        parse_prefix(raw).map_err(|e| format!("network address parse error during conversion from string: {e}"))?;
    if prefix.addr.is_4in6() {
        return Err(format!("IPv4-mapped IPv6 address {} is not allowed", go_quote(raw)));
    }
    Ok(prefix)
}

fn string_arg(value: &Value) -> Result<&str, ExecutionError> {
    match value {
        Value::String(s) => Ok(s.as_str()),
        _ => Err(error(NO_SUCH_OVERLOAD)),
    }
}

fn ip_of(value: &Value) -> Result<Addr, ExecutionError> {
    match value {
        Value::Opaque(o) => o.downcast_ref::<Ip>().map(|ip| ip.0).ok_or_else(|| error(NO_SUCH_OVERLOAD)),
        _ => Err(error(NO_SUCH_OVERLOAD)),
    }
}

fn cidr_of(value: &Value) -> Result<Prefix, ExecutionError> {
    match value {
        Value::Opaque(o) => o.downcast_ref::<Cidr>().map(|c| c.0).ok_or_else(|| error(NO_SUCH_OVERLOAD)),
        _ => Err(error(NO_SUCH_OVERLOAD)),
    }
}

fn first(args: &[CowVal<'_, '_>]) -> Result<Value, ExecutionError> {
    values(args)?.into_iter().next().ok_or_else(|| error(NO_SUCH_OVERLOAD))
}

fn ip_value<'b, 'v>(addr: Addr) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Value::Opaque(Arc::new(Ip(addr))).into_resolve_result()
}

fn cidr_value<'b, 'v>(prefix: Prefix) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Value::Opaque(Arc::new(Cidr(prefix))).into_resolve_result()
}

fn to_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let arg = first(&args)?;
    ip_value(parse_ip(string_arg(&arg)?).map_err(error)?)
}

fn is_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let arg = first(&args)?;
    Value::Bool(parse_ip(string_arg(&arg)?).is_ok()).into_resolve_result()
}

fn is_canonical<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let arg = first(&args)?;
    let raw = string_arg(&arg)?;
    let addr = parse_ip(raw).map_err(error)?;
    Value::Bool(addr.to_string() == raw).into_resolve_result()
}

fn to_string<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let arg = first(&args)?;
    let text = match (ip_of(&arg), cidr_of(&arg)) {
        (Ok(ip), _) => ip.to_string(),
        (_, Ok(cidr)) => cidr.to_string(),
        _ => return Err(error(NO_SUCH_OVERLOAD)),
    };
    Value::from(text).into_resolve_result()
}

fn family<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let ip = ip_of(&first(&args)?)?;
    Value::Int(i64::from(if ip.bit_len() == 32 { 4u8 } else { 6 })).into_resolve_result()
}

fn predicate<'b, 'v>(args: &[CowVal<'b, 'v>], test: fn(&Addr) -> bool) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let ip = ip_of(&first(args)?)?;
    Value::Bool(test(&ip)).into_resolve_result()
}

fn is_unspecified<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    predicate(&args, Addr::is_unspecified)
}

fn is_loopback<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    predicate(&args, Addr::is_loopback)
}

fn is_link_local_multicast<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    predicate(&args, Addr::is_link_local_multicast)
}

fn is_link_local_unicast<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    predicate(&args, Addr::is_link_local_unicast)
}

fn is_global_unicast<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    predicate(&args, Addr::is_global_unicast)
}

fn to_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let arg = first(&args)?;
    let prefix = parse_cidr(string_arg(&arg)?)
        .map_err(|e| error(format!("network address parse error during conversion from string: {e}")))?;
    cidr_value(prefix)
}

fn is_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let arg = first(&args)?;
    Value::Bool(parse_cidr(string_arg(&arg)?).is_ok()).into_resolve_result()
}

fn contains_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let args = values(&args)?;
    let cidr = cidr_of(args.first().ok_or_else(|| error(NO_SUCH_OVERLOAD))?)?;
    let ip = match args.get(1) {
        // cidrContainsIPString: a string that is no IP gives `no such overload`.
        Some(Value::String(s)) => parse_ip(s).map_err(|_| error(NO_SUCH_OVERLOAD))?,
        Some(other) => ip_of(other)?,
        None => return Err(error(NO_SUCH_OVERLOAD)),
    };
    Value::Bool(cidr.contains(&ip)).into_resolve_result()
}

fn contains_cidr<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let args = values(&args)?;
    let cidr = cidr_of(args.first().ok_or_else(|| error(NO_SUCH_OVERLOAD))?)?;
    let other = match args.get(1) {
        Some(Value::String(s)) => parse_cidr(s)
            .map_err(|e| error(format!("network address parse error during conversion from string: {e}")))?,
        Some(other) => cidr_of(other)?,
        None => return Err(error(NO_SUCH_OVERLOAD)),
    };
    // cidrContainsCIDR: `cidr.Prefix.Masked() == netip.PrefixFrom(other.Addr(), cidr.Bits())`; PrefixFrom does
    // not mask, so the other's address must be this network's address exactly (`10.0.0.0/8` contains
    // `10.0.0.0/16` but not `10.1.0.0/16`, whatever cidr.go's doc comment says), and be no shorter.
    let equal = cidr.masked() == Prefix { addr: other.addr, bits: cidr.bits };
    Value::Bool(equal && cidr.bits <= other.bits).into_resolve_result()
}

fn cidr_ip<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    ip_value(cidr_of(&first(&args)?)?.addr)
}

fn prefix_length<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Value::Int(i64::from(cidr_of(&first(&args)?)?.bits)).into_resolve_result()
}

fn masked<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    cidr_value(cidr_of(&first(&args)?)?.masked())
}

/// The opaque type of the values (`Type` is not `Clone`).
fn ip_type() -> Type {
    Type::new_opaque_type("net.IP")
}

/// The opaque type of the values (`Type` is not `Clone`).
fn cidr_type() -> Type {
    Type::new_opaque_type("net.CIDR")
}
