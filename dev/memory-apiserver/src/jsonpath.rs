//! The JSONPath subset of `additionalPrinterColumns`: `.a.b`, `['a.b']`, `[0]`, `[*]` and
//! `[?(@.type=="Ready")]`, optionally wrapped in `{...}`.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    Filter { path: Vec<String>, equals: Value },
}

/// A parsed path.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath {
    steps: Vec<Step>,
}

impl JsonPath {
    /// Parses a path; an unsupported expression is an error.
    pub fn parse(input: &str) -> Result<JsonPath, String> {
        let text = input.trim();
        let text = text.strip_prefix('{').and_then(|t| t.strip_suffix('}')).unwrap_or(text).trim();
        let text = text.strip_prefix('$').unwrap_or(text);
        let chars: Vec<char> = text.chars().collect();
        let mut steps = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '.' => {
                    let start = i + 1;
                    let mut end = start;
                    while end < chars.len() && chars[end] != '.' && chars[end] != '[' {
                        end += 1;
                    }
                    let name: String = chars[start..end].iter().collect();
                    if !name.is_empty() {
                        steps.push(Step::Field(name));
                    }
                    i = end;
                }
                '[' => {
                    let close = find_close(&chars, i).ok_or_else(|| format!("unclosed [ in {input}"))?;
                    let inner: String = chars[i + 1..close].iter().collect();
                    steps.push(
                        parse_bracket(inner.trim())
                            .ok_or_else(|| format!("unsupported expression [{inner}] in {input}"))?,
                    );
                    i = close + 1;
                }
                c => return Err(format!("unexpected {c:?} in {input}")),
            }
        }
        Ok(JsonPath { steps })
    }

    /// Every value the path selects.
    pub fn find<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        let mut current = vec![root];
        for step in &self.steps {
            let mut next = Vec::new();
            for value in current {
                match step {
                    Step::Field(name) => next.extend(value.get(name)),
                    Step::Index(i) => next.extend(value.get(i)),
                    Step::All => match value {
                        Value::Array(items) => next.extend(items.iter()),
                        Value::Object(fields) => next.extend(fields.values()),
                        _ => {}
                    },
                    Step::Filter { path, equals } => {
                        if let Value::Array(items) = value {
                            next.extend(
                                items
                                    .iter()
                                    .filter(|item| path.iter().try_fold(*item, |v, k| v.get(k)) == Some(equals)),
                            );
                        }
                    }
                }
            }
            current = next;
        }
        current
    }
}

fn find_close(chars: &[char], open: usize) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut depth = 0;
    for (offset, c) in chars[open..].iter().enumerate() {
        match (quote, c) {
            (Some(q), c) if *c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(*c),
            (None, '[') => depth += 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + offset);
                }
            }
            _ => {}
        }
    }
    None
}

fn unquote(text: &str) -> Option<&str> {
    text.strip_prefix('\'')
        .and_then(|t| t.strip_suffix('\''))
        .or_else(|| text.strip_prefix('"').and_then(|t| t.strip_suffix('"')))
}

fn parse_bracket(inner: &str) -> Option<Step> {
    if inner == "*" {
        return Some(Step::All);
    }
    if let Ok(index) = inner.parse::<usize>() {
        return Some(Step::Index(index));
    }
    if let Some(name) = unquote(inner) {
        return Some(Step::Field(name.to_owned()));
    }
    let condition = inner.strip_prefix("?(")?.strip_suffix(')')?.trim();
    let (left, right) = condition.split_once("==")?;
    let path: Vec<String> = left.trim().strip_prefix("@.")?.split('.').map(str::to_owned).collect();
    let right = right.trim();
    let equals = match unquote(right) {
        Some(text) => Value::String(text.to_owned()),
        None => serde_json::from_str(right).ok()?,
    };
    Some(Step::Filter { path, equals })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn printer_column_paths_select_as_kubectl_does() {
        let object = json!({"metadata": {"name": "n", "labels": {"a.b/c": "x"}},
            "spec": {"items": [{"v": 1}, {"v": 2}]},
            "status": {"conditions": [{"type": "Ready", "reason": "A"}, {"type": "UpToDate", "reason": "B"}]}});
        let find = |path: &str| JsonPath::parse(path).unwrap().find(&object).into_iter().cloned().collect::<Vec<_>>();
        assert_eq!(find(".metadata.name"), vec![json!("n")]);
        assert_eq!(find("{.metadata.name}"), vec![json!("n")]);
        assert_eq!(find(".status.conditions[?(@.type==\"UpToDate\")].reason"), vec![json!("B")]);
        assert_eq!(find(".status.conditions[?(@.type=='Ready')].reason"), vec![json!("A")]);
        assert_eq!(find(".spec.items[1].v"), vec![json!(2)]);
        assert_eq!(find(".spec.items[*].v"), vec![json!(1), json!(2)]);
        assert_eq!(find(".metadata.labels['a.b/c']"), vec![json!("x")]);
        assert!(find(".spec.missing").is_empty());
    }

    #[test]
    fn unsupported_paths_are_errors() {
        for bad in [".a[", ".a[?(@.x>1)]", "a.b", ".a[foo]"] {
            assert!(JsonPath::parse(bad).is_err(), "{bad}");
        }
    }
}
