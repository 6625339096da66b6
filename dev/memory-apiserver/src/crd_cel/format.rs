//! The Kubernetes format library of CEL (kubernetes/kubernetes `staging/src/k8s.io/apiserver/pkg/cel/library/
//! format.go`, in the CRD rule environment since 1.31, so usable in new rules from 1.32): `format.named(name)`
//! (an optional format), `format.dns1123Label()` and the other named formats, and `<format>.validate(string)`:
//! `optional.none()` when valid, else `optional.of(<the validator's messages>)`.
//!
//! The messages are apimachinery's (`staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go`:
//! `IsDNS1123Label`, `IsDNS1123Subdomain`, `IsDNS1035Label`, `IsQualifiedName`, `IsValidLabelValue`, with
//! `RegexError` / `MaxLenError`; `pkg/api/validation/generic.go` `maskTrailingDash` for the `...Prefix` forms),
//! `uri` is `url.ParseRequestURI`'s error ([`super::url`]), and `uuid`, `byte`, `date`, `datetime` give
//! kube-openapi strfmt's one-line messages.
//!
//! # Assumptions
//! - `datetime` accepts what the dev server accepts for `format: date-time` (an RFC 3339 timestamp); strfmt also
//!   accepts a few ISO 8601 variants (no colon in the offset, no seconds), which are refused here.

use super::call::{NO_SUCH_OVERLOAD, error, values};
use cel::common::types::{STRING_TYPE, Type};
use cel::common::value::CowVal;
use cel::extractors::IntoResolveResult;
use cel::objects::{Opaque, OptionalValue};
use cel::{Env, ExecutionError, Value};
use regex::Regex;
use std::sync::{Arc, LazyLock};

/// A named format (`apiservercel.Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format(&'static str);

impl Opaque for Format {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.NamedFormat"
    }
}

/// The names `format.named` knows (format.go `ConstantFormats`).
const NAMES: [&str; 13] = [
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
];

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MESSAGE: &str =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

fn anchored(pattern: &str) -> Regex {
    // The patterns are constants of this file; a failure would be a bug caught by the tests.
    Regex::new(&format!("^(?:{pattern})$")).unwrap_or_else(|_| Regex::new("^$").expect("the empty pattern compiles"))
}

static DNS1123_LABEL: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1123_LABEL_FMT));
static DNS1123_SUBDOMAIN: LazyLock<Regex> = LazyLock::new(|| anchored(&subdomain_fmt()));
static DNS1035_LABEL: LazyLock<Regex> = LazyLock::new(|| anchored(DNS1035_LABEL_FMT));
static QUALIFIED_NAME: LazyLock<Regex> = LazyLock::new(|| anchored(QUALIFIED_NAME_FMT));
static LABEL_VALUE: LazyLock<Regex> = LazyLock::new(|| anchored(&format!("({QUALIFIED_NAME_FMT})?")));
static UUID: LazyLock<Regex> =
    LazyLock::new(|| anchored("(?i)[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}"));
static DATE: LazyLock<Regex> = LazyLock::new(|| anchored("[0-9]{4}-[0-9]{2}-[0-9]{2}"));

fn subdomain_fmt() -> String {
    format!("{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*")
}

/// `RegexError`.
fn regex_error(message: &str, format: &str, examples: &[&str]) -> String {
    let mut out = format!("{message} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{example}', "));
    }
    out.push_str(&format!("regex used for validation is '{format}')"));
    out
}

fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

fn dns1123_label(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push(max_len_error(63));
    }
    if !DNS1123_LABEL.is_match(value) {
        errors.push(regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            DNS1123_LABEL_FMT,
            &["my-name", "123-abc"],
        ));
    }
    errors
}

fn dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 253 {
        errors.push(max_len_error(253));
    }
    if !DNS1123_SUBDOMAIN.is_match(value) {
        errors.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            &subdomain_fmt(),
            &["example.com"],
        ));
    }
    errors
}

fn dns1035_label(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push(max_len_error(63));
    }
    if !DNS1035_LABEL.is_match(value) {
        errors.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errors
}

fn qualified_name(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_owned());
            } else {
                errors.extend(dns1123_subdomain(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_MESSAGE, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            )];
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errors.push(format!("name part {}", max_len_error(63)));
    }
    if !QUALIFIED_NAME.is_match(name) {
        errors.push(format!(
            "name part {}",
            regex_error(QUALIFIED_NAME_MESSAGE, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
        ));
    }
    errors
}

fn label_value(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push(max_len_error(63));
    }
    if !LABEL_VALUE.is_match(value) {
        errors.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            &format!("({QUALIFIED_NAME_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errors
}

/// generic.go `maskTrailingDash`: a trailing dash of a generateName prefix replaced (the two last characters
/// become `a`, as upstream slices them).
fn mask_trailing_dash(name: &str) -> String {
    if name.len() > 1 && name.ends_with('-') {
        format!("{}a", name.get(..name.len() - 2).unwrap_or_default())
    } else {
        name.to_owned()
    }
}

fn valid_date(value: &str) -> bool {
    DATE.is_match(value)
        && value
            .split('-')
            .map(str::parse::<i32>)
            .collect::<Result<Vec<_>, _>>()
            .is_ok_and(|p| p.len() == 3 && jiff::civil::Date::new(p[0] as i16, p[1] as i8, p[2] as i8).is_ok())
}

/// The messages of the named format for `value` (empty when valid).
pub fn validate_named(name: &str, value: &str) -> Vec<String> {
    let one = |ok: bool, message: &str| if ok { Vec::new() } else { vec![message.to_owned()] };
    match name {
        "dns1123Label" => dns1123_label(value),
        "dns1123Subdomain" => dns1123_subdomain(value),
        "dns1035Label" => dns1035_label(value),
        "qualifiedName" => qualified_name(value),
        "dns1123LabelPrefix" => dns1123_label(&mask_trailing_dash(value)),
        "dns1123SubdomainPrefix" => dns1123_subdomain(&mask_trailing_dash(value)),
        "dns1035LabelPrefix" => dns1035_label(&mask_trailing_dash(value)),
        "labelValue" => label_value(value),
        "uri" => super::url::parse_request_uri(value).err().into_iter().collect(),
        "uuid" => one(UUID.is_match(value), "does not match the UUID format"),
        "byte" => {
            use base64::Engine as _;
            one(base64::engine::general_purpose::STANDARD.decode(value).is_ok(), "invalid base64")
        }
        "date" => one(valid_date(value), "invalid date"),
        "datetime" => one(value.parse::<jiff::Timestamp>().is_ok(), "invalid datetime"),
        _ => Vec::new(),
    }
}

/// Registers the library on `env`.
pub fn register(env: &mut Env) -> Result<(), cel::DeclarationError> {
    env.add_overload("format.named", "format-named", vec![STRING_TYPE], named)?;
    env.add_member_overload("validate", "format-validate", format_type(), vec![STRING_TYPE], validate)?;
    for name in NAMES {
        let function: cel::common::functions::Function = match name {
            "dns1123Label" => |_| constant("dns1123Label"),
            "dns1123Subdomain" => |_| constant("dns1123Subdomain"),
            "dns1035Label" => |_| constant("dns1035Label"),
            "qualifiedName" => |_| constant("qualifiedName"),
            "dns1123LabelPrefix" => |_| constant("dns1123LabelPrefix"),
            "dns1123SubdomainPrefix" => |_| constant("dns1123SubdomainPrefix"),
            "dns1035LabelPrefix" => |_| constant("dns1035LabelPrefix"),
            "labelValue" => |_| constant("labelValue"),
            "uri" => |_| constant("uri"),
            "uuid" => |_| constant("uuid"),
            "byte" => |_| constant("byte"),
            "date" => |_| constant("date"),
            _ => |_| constant("datetime"),
        };
        let qualified = format!("format.{name}");
        env.add_overload(&qualified, &qualified, vec![], function)?;
    }
    Ok(())
}

fn constant<'b, 'v>(name: &'static str) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Value::Opaque(Arc::new(Format(name))).into_resolve_result()
}

fn named<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let name = match values(&args)?.into_iter().next() {
        Some(Value::String(s)) => s,
        _ => return Err(error(NO_SUCH_OVERLOAD)),
    };
    let found = NAMES.iter().copied().find(|n| *n == name.as_str());
    let optional = match found {
        Some(name) => OptionalValue::of(Value::Opaque(Arc::new(Format(name)))),
        None => OptionalValue::none(),
    };
    Value::Opaque(Arc::new(optional)).into_resolve_result()
}

fn validate<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let args = values(&args)?;
    let format = match args.first() {
        Some(Value::Opaque(o)) => o.downcast_ref::<Format>().copied().ok_or_else(|| error(NO_SUCH_OVERLOAD))?,
        _ => return Err(error(NO_SUCH_OVERLOAD)),
    };
    let Some(Value::String(text)) = args.get(1) else { return Err(error(NO_SUCH_OVERLOAD)) };
    let messages = validate_named(format.0, text);
    let optional = if messages.is_empty() {
        OptionalValue::none()
    } else {
        OptionalValue::of(Value::List(Arc::new(messages.into_iter().map(Value::from).collect())))
    };
    Value::Opaque(Arc::new(optional)).into_resolve_result()
}

/// The opaque type of the values (`Type` is not `Clone`).
fn format_type() -> Type {
    Type::new_opaque_type("kubernetes.NamedFormat")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_formats_give_apimachinerys_messages() {
        assert!(validate_named("dns1123Label", "my-label").is_empty());
        assert_eq!(
            validate_named("dns1123Label", "My_Label"),
            [
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ]
        );
        assert_eq!(validate_named("dns1123Label", &"a".repeat(64)), ["must be no more than 63 characters"]);
        assert!(validate_named("dns1123LabelPrefix", "my-prefix-").is_empty());
        assert!(!validate_named("dns1123Label", "my-prefix-").is_empty());
        assert!(validate_named("dns1123Subdomain", "apiextensions.k8s.io").is_empty());
        assert!(validate_named("qualifiedName", "apiextensions.k8s.io/v1beta1").is_empty());
        assert_eq!(validate_named("qualifiedName", "/x"), ["prefix part must be non-empty"]);
        assert!(validate_named("labelValue", "").is_empty());
        assert!(validate_named("uuid", "123e4567-e89b-12d3-a456-426614174000").is_empty());
        assert_eq!(validate_named("uuid", "nope"), ["does not match the UUID format"]);
        assert!(validate_named("byte", "aGVsbG8=").is_empty());
        assert_eq!(validate_named("byte", "a"), ["invalid base64"]);
        assert!(validate_named("date", "2021-01-01").is_empty());
        assert_eq!(validate_named("date", "2021-02-30"), ["invalid date"]);
        assert!(validate_named("datetime", "2021-01-01T00:00:00Z").is_empty());
        assert_eq!(validate_named("uri", "x"), ["parse \"x\": invalid URI for request"]);
    }
}
