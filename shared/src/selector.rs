//! Label selectors read as the API server reads them, matched by kube's [`Selector`].
//!
//! kube's `TryFrom<LabelSelector>` is more lenient than the API server: it takes `In` with an empty value list
//! and `Exists` with values, which the API server refuses. The checks here are those of the API server
//! (k8s.io/apimachinery `pkg/apis/meta/v1/helpers.go` `LabelSelectorAsSelector` and `pkg/labels/selector.go`
//! `NewRequirement`); the matching is kube's `SelectorExt::matches`, which is `Requirement.Matches` of
//! `pkg/labels/selector.go`: `In` and `Exists` need the key, `NotIn` and `DoesNotExist` match a missing key, and a
//! selector without requirements matches everything. A null selector (none at all) selects nothing; that is the
//! caller's `Option`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
pub use kube::core::{Expression, Selector, SelectorExt};

/// Why a label selector is refused, naming the requirement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("unknown operator {operator:?} on {key:?} (In, NotIn, Exists, DoesNotExist)")]
    UnknownOperator { key: String, operator: String },
    #[error("{operator} on {key:?} needs values")]
    NeedsValues { key: String, operator: String },
    #[error("{operator} on {key:?} takes no values")]
    TakesNoValues { key: String, operator: String },
    #[error("{0}")]
    Other(String),
}

/// `selector` as the API server reads it; an empty selector is one that matches everything.
pub fn parse(selector: &LabelSelector) -> Result<Selector, SelectorError> {
    for LabelSelectorRequirement { key, operator, values } in selector.match_expressions.iter().flatten() {
        let some = values.as_ref().is_some_and(|v| !v.is_empty());
        let error = |make: fn(String, String) -> SelectorError| Err(make(key.clone(), operator.clone()));
        match operator.as_str() {
            "In" | "NotIn" if !some => return error(|key, operator| SelectorError::NeedsValues { key, operator }),
            "Exists" | "DoesNotExist" if some => {
                return error(|key, operator| SelectorError::TakesNoValues { key, operator });
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            _ => return error(|key, operator| SelectorError::UnknownOperator { key, operator }),
        }
    }
    Selector::try_from(selector.clone()).map_err(|e| SelectorError::Other(e.0))
}

/// Whether `selector` selects an object with `labels` (`None`: the object has no labels).
pub fn matches(selector: &Selector, labels: Option<&BTreeMap<String, String>>) -> bool {
    match labels {
        Some(labels) => selector.matches(labels),
        None => selector.matches(&BTreeMap::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(json: serde_json::Value) -> Result<Selector, SelectorError> {
        parse(&serde_json::from_value(json).unwrap())
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn requirements_match_as_the_api_servers_do() {
        let s = selector(serde_json::json!({
            "matchLabels": {"a": "1"},
            "matchExpressions": [
                {"key": "b", "operator": "In", "values": ["x", "y"]},
                {"key": "c", "operator": "NotIn", "values": ["z"]},
                {"key": "d", "operator": "Exists"},
                {"key": "e", "operator": "DoesNotExist"}
            ]
        }))
        .unwrap();
        // NotIn and DoesNotExist match a missing key.
        assert!(matches(&s, Some(&labels(&[("a", "1"), ("b", "y"), ("d", "")]))));
        assert!(!matches(&s, Some(&labels(&[("a", "1"), ("b", "y"), ("d", ""), ("c", "z")]))));
        assert!(matches(&s, Some(&labels(&[("a", "1"), ("b", "y"), ("d", ""), ("c", "q")]))));
        assert!(!matches(&s, Some(&labels(&[("a", "1"), ("b", "y"), ("d", ""), ("e", "1")]))));
        // In needs the key and one of its values; Exists the key; matchLabels the value.
        assert!(!matches(&s, Some(&labels(&[("a", "1"), ("d", "")]))));
        assert!(!matches(&s, Some(&labels(&[("a", "1"), ("b", "q"), ("d", "")]))));
        assert!(!matches(&s, Some(&labels(&[("a", "1"), ("b", "y")]))));
        assert!(!matches(&s, Some(&labels(&[("a", "2"), ("b", "y"), ("d", "")]))));
        assert!(!matches(&s, None));
    }

    #[test]
    fn an_empty_selector_matches_everything() {
        for empty in [serde_json::json!({}), serde_json::json!({"matchLabels": {}, "matchExpressions": []})] {
            let s = selector(empty).unwrap();
            assert!(s.selects_all());
            assert!(matches(&s, None) && matches(&s, Some(&labels(&[("any", "thing")]))));
        }
    }

    /// kube's conversion alone takes these; the API server (`NewRequirement`) refuses them.
    #[test]
    fn requirements_the_api_server_refuses_are_refused() {
        let refused = |expression: serde_json::Value| selector(serde_json::json!({"matchExpressions": [expression]}));
        assert_eq!(
            refused(serde_json::json!({"key": "a", "operator": "In", "values": []})),
            Err(SelectorError::NeedsValues { key: "a".into(), operator: "In".into() })
        );
        assert_eq!(
            refused(serde_json::json!({"key": "a", "operator": "NotIn"})),
            Err(SelectorError::NeedsValues { key: "a".into(), operator: "NotIn".into() })
        );
        assert_eq!(
            refused(serde_json::json!({"key": "a", "operator": "Exists", "values": ["x"]})),
            Err(SelectorError::TakesNoValues { key: "a".into(), operator: "Exists".into() })
        );
        assert_eq!(
            refused(serde_json::json!({"key": "a", "operator": "Near"})),
            Err(SelectorError::UnknownOperator { key: "a".into(), operator: "Near".into() })
        );
        assert!(
            Selector::try_from(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "a".into(),
                    operator: "In".into(),
                    values: Some(vec![])
                }]),
                ..Default::default()
            })
            .is_ok()
        );
    }
}
