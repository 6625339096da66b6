//! Label selectors: the string syntax of `?labelSelector=` and the `LabelSelector` objects of PDBs and workloads.
//!
//! # Guarantees
//! - Accepts every form `k8s.io/apimachinery/pkg/labels` parses: `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
//!   `k notin (a,b)`, `k`, `!k`, `k>N`, `k<N`, joined by commas, with whitespace around tokens.
//! - `!=` and `notin` also match objects without the key.
//! - Keys and values are validated as label keys and values; anything else is an error, never a panic.

use serde_json::Value;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq)]
pub enum Requirement {
    /// `k=v`, `k==v`, `k in (a,b)`.
    In(String, Vec<String>),
    /// `k!=v`, `k notin (a,b)`; matches when the key is missing.
    NotIn(String, Vec<String>),
    /// `k`.
    Exists(String),
    /// `!k`.
    DoesNotExist(String),
    /// `k>N`.
    GreaterThan(String, i64),
    /// `k<N`.
    LessThan(String, i64),
}

/// A parsed label selector: the AND of its requirements. Empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Matches every object.
    pub fn everything() -> Self {
        LabelSelector::default()
    }

    /// True when the selector has no requirement.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Parses the string form.
    pub fn parse(input: &str) -> Result<Self, String> {
        Parser { tokens: tokenize(input)?, at: 0 }.selector().map(|requirements| LabelSelector { requirements })
    }

    /// Evaluates a `metav1.LabelSelector` object (`matchLabels` and `matchExpressions`).
    pub fn from_object(selector: &Value) -> Result<Self, String> {
        let mut requirements = Vec::new();
        if let Some(labels) = selector.get("matchLabels") {
            let labels = labels.as_object().ok_or("matchLabels must be an object")?;
            for (key, value) in labels {
                let value = value.as_str().ok_or("matchLabels values must be strings")?;
                validate_key(key)?;
                validate_value(value)?;
                requirements.push(Requirement::In(key.clone(), vec![value.to_owned()]));
            }
        }
        if let Some(expressions) = selector.get("matchExpressions") {
            let expressions = expressions.as_array().ok_or("matchExpressions must be a list")?;
            for expression in expressions {
                let key = expression.get("key").and_then(Value::as_str).ok_or("key is required")?;
                validate_key(key)?;
                let values: Vec<String> = expression
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|v| v.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                    .unwrap_or_default();
                let operator = expression.get("operator").and_then(Value::as_str).unwrap_or_default();
                let requirement = match operator {
                    "In" | "NotIn" if values.is_empty() => {
                        return Err(format!(
                            "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty ({key})"
                        ));
                    }
                    "In" => Requirement::In(key.to_owned(), values),
                    "NotIn" => Requirement::NotIn(key.to_owned(), values),
                    "Exists" if values.is_empty() => Requirement::Exists(key.to_owned()),
                    "DoesNotExist" if values.is_empty() => Requirement::DoesNotExist(key.to_owned()),
                    "Exists" | "DoesNotExist" => {
                        return Err(format!("values set must be empty for exists and does not exist ({key})"));
                    }
                    other => return Err(format!("{other:?} is not a valid label selector operator")),
                };
                requirements.push(requirement);
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// True when the labels (key/value pairs) satisfy every requirement.
    pub fn matches<'a>(&self, labels: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|requirement| match requirement {
            Requirement::In(key, values) => labels(key).is_some_and(|v| values.iter().any(|w| w == v)),
            Requirement::NotIn(key, values) => labels(key).is_none_or(|v| values.iter().all(|w| w != v)),
            Requirement::Exists(key) => labels(key).is_some(),
            Requirement::DoesNotExist(key) => labels(key).is_none(),
            Requirement::GreaterThan(key, n) => labels(key).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *n),
            Requirement::LessThan(key, n) => labels(key).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *n),
        })
    }

    /// Matches against a JSON `labels` map.
    pub fn matches_map(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        self.matches(|key| labels.and_then(|l| l.get(key)).and_then(Value::as_str))
    }

    /// The requirements, for callers that index on equality.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Open,
    Close,
    Comma,
    Eq,
    DoubleEq,
    NotEq,
    Bang,
    Gt,
    Lt,
}

fn tokenize(input: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut chars = input.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '(' | ')' | ',' | '>' | '<' => {
                chars.next();
                tokens.push(match c {
                    '(' => Token::Open,
                    ')' => Token::Close,
                    ',' => Token::Comma,
                    '>' => Token::Gt,
                    _ => Token::Lt,
                });
            }
            '=' => {
                chars.next();
                if chars.peek() == Some(&'=') {
                    chars.next();
                    tokens.push(Token::DoubleEq);
                } else {
                    tokens.push(Token::Eq);
                }
            }
            '!' => {
                chars.next();
                if chars.peek() == Some(&'=') {
                    chars.next();
                    tokens.push(Token::NotEq);
                } else {
                    tokens.push(Token::Bang);
                }
            }
            _ => {
                let mut word = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || "(),=!<>".contains(c) {
                        break;
                    }
                    word.push(c);
                    chars.next();
                }
                tokens.push(Token::Word(word));
            }
        }
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        token
    }

    fn selector(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        if self.tokens.is_empty() {
            return Ok(requirements);
        }
        loop {
            requirements.push(self.requirement()?);
            match self.next() {
                None => return Ok(requirements),
                Some(Token::Comma) => continue,
                Some(other) => return Err(format!("found '{other:?}', expected: ',' or 'end of string'")),
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        if self.peek() == Some(&Token::Bang) {
            self.next();
            let key = self.key()?;
            return Ok(Requirement::DoesNotExist(key));
        }
        let key = self.key()?;
        match self.peek() {
            None | Some(Token::Comma) => Ok(Requirement::Exists(key)),
            Some(Token::Eq | Token::DoubleEq) => {
                self.next();
                Ok(Requirement::In(key, vec![self.value()?]))
            }
            Some(Token::NotEq) => {
                self.next();
                Ok(Requirement::NotIn(key, vec![self.value()?]))
            }
            Some(Token::Gt | Token::Lt) => {
                let greater = self.next() == Some(Token::Gt);
                let value = self.value()?;
                let n = value
                    .parse::<i64>()
                    .map_err(|_| format!("for 'Gt', 'Lt' operators, the value must be an integer: {value}"))?;
                Ok(if greater { Requirement::GreaterThan(key, n) } else { Requirement::LessThan(key, n) })
            }
            Some(Token::Word(op)) if op == "in" || op == "notin" => {
                let is_in = op == "in";
                self.next();
                let values = self.set()?;
                Ok(if is_in { Requirement::In(key, values) } else { Requirement::NotIn(key, values) })
            }
            Some(other) => Err(format!("found '{other:?}', expected: in, notin, =, ==, !=, gt, lt")),
        }
    }

    fn key(&mut self) -> Result<String, String> {
        match self.next() {
            Some(Token::Word(word)) => {
                validate_key(&word)?;
                Ok(word)
            }
            other => Err(format!("found '{other:?}', expected: identifier")),
        }
    }

    fn value(&mut self) -> Result<String, String> {
        match self.peek() {
            Some(Token::Word(_)) => match self.next() {
                Some(Token::Word(word)) => {
                    validate_value(&word)?;
                    Ok(word)
                }
                _ => Err("expected a value".into()),
            },
            // `k=` selects the empty value.
            None | Some(Token::Comma) => Ok(String::new()),
            Some(other) => Err(format!("found '{other:?}', expected: identifier")),
        }
    }

    fn set(&mut self) -> Result<Vec<String>, String> {
        if self.next() != Some(Token::Open) {
            return Err("found something else, expected: '('".into());
        }
        let mut values = Vec::new();
        loop {
            match self.next() {
                Some(Token::Word(word)) => {
                    validate_value(&word)?;
                    values.push(word);
                }
                Some(Token::Close) if values.is_empty() => return Ok(values),
                Some(Token::Comma) => {
                    // An empty value between commas: `(a,,b)` is accepted upstream as "".
                    values.push(String::new());
                    continue;
                }
                other => return Err(format!("found '{other:?}', expected: identifier")),
            }
            match self.next() {
                Some(Token::Comma) => continue,
                Some(Token::Close) => return Ok(values),
                other => return Err(format!("found '{other:?}', expected: ',' or ')'")),
            }
        }
    }
}

/// Validates a label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63 characters.
pub fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && (prefix.is_empty() || prefix.len() > 253 || !is_dns_subdomain(prefix))
    {
        return Err(format!("invalid label key \"{key}\": prefix part must be a DNS-1123 subdomain"));
    }
    if name.is_empty() || name.len() > 63 || !is_qualified_name_part(name) {
        return Err(format!(
            "invalid label key \"{key}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        ));
    }
    Ok(())
}

/// Validates a label value: empty, or at most 63 characters of `[A-Za-z0-9_.-]` starting and ending alphanumeric.
pub fn validate_value(value: &str) -> Result<(), String> {
    if value.is_empty() || (value.len() <= 63 && is_qualified_name_part(value)) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value: \"{value}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        ))
    }
}

fn is_qualified_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    let edge = |b: u8| b.is_ascii_alphanumeric();
    bytes.first().is_some_and(|b| edge(*b))
        && bytes.last().is_some_and(|b| edge(*b))
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// RFC 1123 subdomain as `IsDNS1123Subdomain` checks it: at most 253 characters matching
/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`. Unlike a label, a part between dots may be
/// longer than 63 characters (Constellation's `k8s-components-sha256-<64 hex>` ConfigMaps are 86).
pub fn is_dns_subdomain(s: &str) -> bool {
    let part = |p: &str| {
        let bytes = p.as_bytes();
        let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        bytes.first().is_some_and(edge) && bytes.last().is_some_and(edge) && bytes.iter().all(|b| edge(b) || *b == b'-')
    };
    !s.is_empty() && s.len() <= 253 && s.split('.').all(part)
}

/// RFC 1123 label: at most 63 lowercase alphanumerics or `-`, alphanumeric at both ends.
pub fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
        && bytes.iter().all(|b| edge(b) || *b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn matches(selector: &str, labels: &[(&str, &str)]) -> bool {
        let selector = LabelSelector::parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
        selector.matches(|k| labels.iter().find(|(key, _)| *key == k).map(|(_, v)| *v))
    }

    #[test]
    fn every_string_form_matches_as_upstream() {
        type Labels<'a> = &'a [(&'a str, &'a str)];
        let cases: &[(&str, Labels, bool)] = &[
            ("", &[], true),
            ("a=b", &[("a", "b")], true),
            ("a==b", &[("a", "b")], true),
            ("a=b", &[("a", "c")], false),
            ("a!=b", &[], true),
            ("a!=b", &[("a", "b")], false),
            ("a in (x,y)", &[("a", "y")], true),
            ("a in (x, y)", &[("a", "z")], false),
            ("a notin (x)", &[], true),
            ("a notin (x)", &[("a", "x")], false),
            ("a", &[("a", "")], true),
            ("a", &[], false),
            ("!a", &[], true),
            ("!a", &[("a", "1")], false),
            ("a>3", &[("a", "4")], true),
            ("a<3", &[("a", "4")], false),
            ("a=b, c!=d ,e", &[("a", "b"), ("e", "1")], true),
            ("a=b,c", &[("a", "b")], false),
            ("a=", &[("a", "")], true),
            ("example.com/role=x", &[("example.com/role", "x")], true),
        ];
        for (selector, labels, expected) in cases {
            assert_eq!(matches(selector, labels), *expected, "{selector} on {labels:?}");
        }
    }

    #[test]
    fn invalid_selectors_are_errors() {
        for bad in ["a=b=c", "a in x", "a in (x", "=b", "a b", "!", "a,", "a>x", "-a=b", "a=b!", "a in (x y)"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn selector_objects_evaluate_match_labels_and_expressions() {
        let selector = LabelSelector::from_object(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "canary", "operator": "DoesNotExist"}
            ]
        }))
        .unwrap();
        let labels = json!({"app": "web", "tier": "b"});
        assert!(selector.matches_map(labels.as_object()));
        let labels = json!({"app": "web", "tier": "b", "canary": "1"});
        assert!(!selector.matches_map(labels.as_object()));
        assert!(LabelSelector::from_object(&json!({})).unwrap().matches_map(None));
        assert!(LabelSelector::from_object(&json!({"matchExpressions": [{"key": "a", "operator": "Bogus"}]})).is_err());
        assert!(LabelSelector::from_object(&json!({"matchExpressions": [{"key": "a", "operator": "In"}]})).is_err());
    }

    #[test]
    fn dns_names_are_checked() {
        assert!(is_dns_subdomain("a.b-c.d"));
        // Parts may be longer than a label (upstream checks the whole name against one regex).
        assert!(is_dns_subdomain(&format!("k8s-components-sha256-{}", "a".repeat(64))));
        assert!(!is_dns_label(&format!("k8s-components-sha256-{}", "a".repeat(64))));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
        assert!(!is_dns_subdomain("A"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(is_dns_label("kube-system"));
        assert!(!is_dns_label("a.b"));
        assert!(!is_dns_label(&"a".repeat(64)));
    }
}
