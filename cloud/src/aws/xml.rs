//! A small XML tree for the answers of the EC2 Query API: elements by local name (namespaces and attributes
//! dropped), their text and children, read with `xmlparser`'s tokenizer.
//!
//! Defensive by construction: any input gives a tree or an [`XmlError`], never a panic; nesting deeper than
//! [`MAX_DEPTH`] or more than [`MAX_ELEMENTS`] elements are refused; entities other than XML's five and character
//! references are refused (no DTD is read or expanded).

use std::fmt;
use xmlparser::{ElementEnd, Token, Tokenizer};

/// The deepest nesting read (EC2's answers nest about 8 levels).
pub(crate) const MAX_DEPTH: usize = 64;

/// The most elements read from one document.
pub(crate) const MAX_ELEMENTS: usize = 200_000;

/// An element: its local name, its text (the concatenation of its text and CDATA, unescaped), its children.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Element {
    pub(crate) name: String,
    pub(crate) text: String,
    pub(crate) children: Vec<Element>,
}

impl Element {
    /// The first child named `name`.
    pub(crate) fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// The element at the end of a path of child names.
    pub(crate) fn path(&self, names: &[&str]) -> Option<&Element> {
        names.iter().try_fold(self, |element, name| element.child(name))
    }

    /// The trimmed text of the first child named `name`, unless it has none.
    pub(crate) fn text_of(&self, name: &str) -> Option<&str> {
        self.child(name).map(|c| c.text.trim()).filter(|t| !t.is_empty())
    }

    /// The `item` members of the list child `name` (EC2's lists: `<name><item>…</item>…</name>`); none when the
    /// list is absent.
    pub(crate) fn items<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a Element> + 'a {
        self.child(name).into_iter().flat_map(|list| list.children.iter().filter(|c| c.name == "item"))
    }
}

/// A document that is not XML this module reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct XmlError(String);

impl fmt::Display for XmlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed XML: {}", self.0)
    }
}

impl std::error::Error for XmlError {}

fn error(what: impl Into<String>) -> XmlError {
    XmlError(what.into())
}

/// The root element of `document`.
///
/// # Errors
/// [`XmlError`] for a document that is not well-formed (unbalanced or mismatched tags, bad escapes, no root), or
/// beyond the limits.
pub(crate) fn parse(document: &str) -> Result<Element, XmlError> {
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    let mut count = 0usize;
    for token in Tokenizer::from(document) {
        let token = token.map_err(|e| error(e.to_string()))?;
        match token {
            Token::ElementStart { local, .. } => {
                if root.is_some() {
                    return Err(error("content after the root element"));
                }
                count += 1;
                if stack.len() >= MAX_DEPTH || count > MAX_ELEMENTS {
                    return Err(error(format!("more than {MAX_DEPTH} levels or {MAX_ELEMENTS} elements")));
                }
                stack.push(Element { name: local.as_str().to_owned(), ..Element::default() });
            }
            Token::ElementEnd { end: ElementEnd::Open, .. } => {}
            Token::ElementEnd { end: ElementEnd::Empty, .. } => close(&mut stack, &mut root, None)?,
            Token::ElementEnd { end: ElementEnd::Close(_, local), .. } => {
                close(&mut stack, &mut root, Some(local.as_str()))?;
            }
            Token::Text { text } => {
                if let Some(open) = stack.last_mut() {
                    open.text.push_str(&unescape(text.as_str())?);
                }
            }
            Token::Cdata { text, .. } => {
                if let Some(open) = stack.last_mut() {
                    open.text.push_str(text.as_str());
                }
            }
            Token::EntityDeclaration { .. } => return Err(error("entity declarations are not read")),
            // The declaration, comments, processing instructions and the rest of a DTD carry no data.
            _ => {}
        }
    }
    if let Some(open) = stack.last() {
        return Err(error(format!("<{}> is not closed", open.name)));
    }
    root.ok_or_else(|| error("no root element"))
}

/// Closes the innermost open element (checking its name when the tag names one) and adds it to its parent.
fn close(stack: &mut Vec<Element>, root: &mut Option<Element>, name: Option<&str>) -> Result<(), XmlError> {
    let element = stack.pop().ok_or_else(|| error("a closing tag without an open element"))?;
    if let Some(name) = name
        && name != element.name
    {
        return Err(error(format!("</{name}> closes <{}>", element.name)));
    }
    match stack.last_mut() {
        Some(parent) => parent.children.push(element),
        None => *root = Some(element),
    }
    Ok(())
}

/// Text with XML's five entities and character references replaced.
fn unescape(text: &str) -> Result<String, XmlError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let end = after.find(';').ok_or_else(|| error("an unterminated entity"))?;
        let entity = &after[..end];
        let c = match entity {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = if let Some(hex) = entity.strip_prefix("#x").or_else(|| entity.strip_prefix("#X")) {
                    u32::from_str_radix(hex, 16).ok()
                } else if let Some(decimal) = entity.strip_prefix('#') {
                    decimal.parse::<u32>().ok()
                } else {
                    None
                };
                code.and_then(char::from_u32).ok_or_else(|| error(format!("the unknown entity &{entity};")))?
            }
        };
        out.push(c);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_texts_lists_and_escapes_are_read_by_local_name() {
        let root = parse(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<A xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
             <!-- a comment --><b>x &amp; y &lt;&#65;&#x42;&gt;</b><list><item><c>1</c></item><item/><other/></list>\
             <e/><ns:f xmlns:ns=\"urn:x\"><![CDATA[<raw>]]></ns:f></A>",
        )
        .unwrap();
        assert_eq!(root.name, "A");
        assert_eq!(root.text_of("b"), Some("x & y <AB>"));
        assert_eq!(root.items("list").count(), 2);
        assert_eq!(root.items("list").next().and_then(|i| i.text_of("c")), Some("1"));
        assert_eq!(root.items("missing").count(), 0);
        assert_eq!(root.text_of("e"), None);
        assert_eq!(root.path(&["f"]).map(|f| f.text.as_str()), Some("<raw>"));
        assert_eq!(root.path(&["list", "item", "c"]).map(|c| c.text.as_str()), Some("1"));
    }

    #[test]
    fn malformed_documents_are_errors_not_panics() {
        let deep = "<a>".repeat(MAX_DEPTH + 1) + &"</a>".repeat(MAX_DEPTH + 1);
        for bad in [
            "",
            "   ",
            "not xml",
            "<a>",
            "</a>",
            "<a></b>",
            "<a><b></a></b>",
            "<a/><b/>",
            "<a>&bogus;</a>",
            "<a>&#xD800;</a>",
            "<a>&#99999999999;</a>",
            "<a>& </a>",
            "<a b=\"1></a>",
            "<!DOCTYPE a [<!ENTITY x \"y\">]><a>&x;</a>",
            "<a>\u{0}</a>",
            deep.as_str(),
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        /// Any text at all, and text of XML's own characters, gives a tree or an error.
        #[test]
        fn any_input_gives_an_answer_never_a_panic(
            any in ".{0,300}",
            markup in "[<>/&;#xX0-9a-c!?\\[\\]\"'= :-]{0,120}",
        ) {
            let _ = parse(&any);
            let _ = parse(&markup);
            let _ = parse(&format!("<a>{markup}</a>"));
        }
    }
}
