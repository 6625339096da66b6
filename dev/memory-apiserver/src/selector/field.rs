//! Field selectors: `?fieldSelector=spec.nodeName=n1,status.phase!=Failed`.
//!
//! # Guarantees
//! - Only `=`, `==` and `!=`; comma means AND; a backslash escapes `,`, `=`, `!` and itself; an empty value is
//!   allowed (`spec.nodeName=` selects unscheduled pods).
//! - Fields are resolved against the resource's selectable fields when parsed, so an unsupported field is an error
//!   (`field label not supported: X`) before any object is looked at.

/// Which value a requirement compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldRef {
    /// `metadata.name`.
    Name,
    /// `metadata.namespace`.
    Namespace,
    /// The resource's n-th selectable field (see `ResourceType::selectable_fields`).
    Custom(usize),
}

/// One `field=value` or `field!=value`.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldRequirement {
    /// The field compared.
    pub field: FieldRef,
    /// `=`/`==` (true) or `!=` (false).
    pub equal: bool,
    /// The value compared with.
    pub value: String,
}

/// A parsed field selector: the AND of its requirements.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    /// The requirements.
    pub requirements: Vec<FieldRequirement>,
}

/// Why a field selector was rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FieldSelectorError {
    /// A term without an operator.
    #[error("invalid selector: '{0}'; can't understand '{1}'")]
    Syntax(String, String),
    /// A field the resource does not support.
    #[error("field label not supported: {0}")]
    Unsupported(String),
}

impl FieldSelector {
    /// Parses `input`; `fields` are the resource's selectable fields besides `metadata.name` and
    /// `metadata.namespace` (the latter only when `namespaced`).
    pub fn parse(input: &str, fields: &[String], namespaced: bool) -> Result<Self, FieldSelectorError> {
        let mut requirements = Vec::new();
        for term in split_unescaped(input, ',') {
            if term.trim().is_empty() {
                continue;
            }
            let (key, equal, value) =
                split_operator(&term).ok_or_else(|| FieldSelectorError::Syntax(input.to_owned(), term.clone()))?;
            let key = key.trim();
            let field = match key {
                "metadata.name" => FieldRef::Name,
                "metadata.namespace" if namespaced => FieldRef::Namespace,
                other => match fields.iter().position(|f| f == other) {
                    Some(index) => FieldRef::Custom(index),
                    None => return Err(FieldSelectorError::Unsupported(other.to_owned())),
                },
            };
            requirements.push(FieldRequirement { field, equal, value: unescape(value.trim()) });
        }
        Ok(FieldSelector { requirements })
    }

    /// True when the selector has no requirement.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// True when every requirement holds; `value` resolves a field of the object.
    pub fn matches<'a>(&self, value: impl Fn(FieldRef) -> &'a str) -> bool {
        self.requirements.iter().all(|r| (value(r.field) == r.value) == r.equal)
    }

    /// The value a requirement `field=value` pins, if any: used to pick a watcher index.
    pub fn pinned(&self, field: FieldRef) -> Option<&str> {
        self.requirements.iter().find(|r| r.field == field && r.equal).map(|r| r.value.as_str())
    }
}

fn split_unescaped(input: &str, separator: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut escaped = false;
    for c in input.chars() {
        if escaped {
            if let Some(last) = parts.last_mut() {
                last.push('\\');
                last.push(c);
            }
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == separator {
            parts.push(String::new());
        } else if let Some(last) = parts.last_mut() {
            last.push(c);
        }
    }
    parts
}

/// Finds the first unescaped `!=`, `==` or `=`.
fn split_operator(term: &str) -> Option<(&str, bool, &str)> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'!' if bytes.get(i + 1) == Some(&b'=') => return Some((&term[..i], false, &term[i + 2..])),
            b'=' if bytes.get(i + 1) == Some(&b'=') => return Some((&term[..i], true, &term[i + 2..])),
            b'=' => return Some((&term[..i], true, &term[i + 1..])),
            _ => i += 1,
        }
    }
    None
}

fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut escaped = false;
    for c in value.chars() {
        if escaped {
            out.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_fields() -> Vec<String> {
        vec!["spec.nodeName".into(), "status.phase".into()]
    }

    fn check(selector: &str, name: &str, node: &str, phase: &str) -> bool {
        let selector = FieldSelector::parse(selector, &pod_fields(), true).unwrap();
        selector.matches(|f| match f {
            FieldRef::Name => name,
            FieldRef::Namespace => "default",
            FieldRef::Custom(0) => node,
            FieldRef::Custom(_) => phase,
        })
    }

    #[test]
    fn equality_inequality_and_empty_values_match() {
        let cases = [
            ("spec.nodeName=n1", "p", "n1", "Running", true),
            ("spec.nodeName==n1", "p", "n2", "Running", false),
            ("spec.nodeName=", "p", "", "Pending", true),
            ("spec.nodeName=", "p", "n1", "Pending", false),
            ("spec.nodeName!=", "p", "n1", "Running", true),
            ("spec.nodeName!=", "p", "", "Running", false),
            ("status.phase=Running,metadata.name=x", "x", "n", "Running", true),
            ("status.phase=Running,metadata.name=x", "y", "n", "Running", false),
            ("metadata.namespace=default", "x", "", "", true),
            ("", "x", "", "", true),
        ];
        for (selector, name, node, phase, expected) in cases {
            assert_eq!(check(selector, name, node, phase), expected, "{selector}");
        }
    }

    #[test]
    fn escapes_protect_separators() {
        let selector = FieldSelector::parse(r"metadata.name=a\,b", &[], false).unwrap();
        assert_eq!(selector.requirements[0].value, "a,b");
    }

    #[test]
    fn unsupported_fields_and_garbage_are_errors() {
        assert_eq!(
            FieldSelector::parse("spec.foo=x", &pod_fields(), true).unwrap_err().to_string(),
            "field label not supported: spec.foo"
        );
        assert!(matches!(FieldSelector::parse("nonsense", &pod_fields(), true), Err(FieldSelectorError::Syntax(..))));
        assert!(FieldSelector::parse("metadata.namespace=x", &[], false).is_err());
    }

    #[test]
    fn pinned_values_feed_the_watcher_index() {
        let selector = FieldSelector::parse("spec.nodeName=n1,metadata.name!=x", &pod_fields(), true).unwrap();
        assert_eq!(selector.pinned(FieldRef::Custom(0)), Some("n1"));
        assert_eq!(selector.pinned(FieldRef::Name), None);
    }
}
