//! The Kubernetes URL library of CEL (kubernetes/kubernetes `staging/src/k8s.io/apiserver/pkg/cel/library/
//! urls.go`, in every CRD rule environment): `url(string)`, `isURL(string)` and the methods `getScheme`,
//! `getHost`, `getHostname`, `getPort`, `getEscapedPath`, `getQuery`.
//!
//! A string is a URL when Go's `url.ParseRequestURI` accepts it (an absolute URI or an absolute path); the value
//! is what `url.Parse` makes of it. Both are ported here from golang/go `src/net/url/url.go` (`parse`,
//! `getScheme`, `parseAuthority`, `parseHost`, `validOptionalPort`, `validUserinfo`, `unescape`, `escape`,
//! `shouldEscape`, `setPath`, `EscapedPath`, `validEncoded`, `splitHostPort`, `parseQuery`), with the same errors:
//! `URL parse error during conversion from string: parse "../x": invalid URI for request`.

use super::call::{NO_SUCH_OVERLOAD, error, values};
use super::netip::go_quote;
use cel::common::types::{STRING_TYPE, Type};
use cel::common::value::CowVal;
use cel::extractors::IntoResolveResult;
use cel::objects::Opaque;
use cel::{Env, ExecutionError, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// A parsed URL (the parts of Go's `url.URL` the library reads).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Url {
    scheme: String,
    host: String,
    path: Vec<u8>,
    raw_path: String,
    raw_query: String,
}

impl Opaque for Url {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.URL"
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Path,
    Host,
    Zone,
    UserPassword,
    QueryComponent,
    Fragment,
}

fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    if matches!(mode, Mode::Host | Mode::Zone)
        && matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'['
                | b']'
                | b'<'
                | b'>'
                | b'"'
        )
    {
        return false;
    }
    match c {
        b'-' | b'_' | b'.' | b'~' => return false,
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => match mode {
            Mode::Path => return c == b'?',
            Mode::UserPassword => return matches!(c, b'@' | b'/' | b'?' | b':'),
            Mode::QueryComponent => return true,
            Mode::Fragment => return false,
            Mode::Host | Mode::Zone => {}
        },
        _ => {}
    }
    if mode == Mode::Fragment && matches!(c, b'!' | b'(' | b')' | b'*') {
        return false;
    }
    true
}

fn unhex(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => 0,
    }
}

/// Go's `EscapeError` / `InvalidHostError` texts.
fn escape_error(bytes: &[u8]) -> String {
    format!("invalid URL escape {}", go_quote(&String::from_utf8_lossy(bytes)))
}

fn unescape(s: &[u8], mode: Mode) -> Result<Vec<u8>, String> {
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' => {
                if i + 2 >= s.len() || !s[i + 1].is_ascii_hexdigit() || !s[i + 2].is_ascii_hexdigit() {
                    return Err(escape_error(&s[i..(i + 3).min(s.len())]));
                }
                if mode == Mode::Host && unhex(s[i + 1]) < 8 && &s[i..i + 3] != b"%25" {
                    return Err(escape_error(&s[i..i + 3]));
                }
                if mode == Mode::Zone {
                    let v = (unhex(s[i + 1]) << 4) | unhex(s[i + 2]);
                    if &s[i..i + 3] != b"%25" && v != b' ' && should_escape(v, Mode::Host) {
                        return Err(escape_error(&s[i..i + 3]));
                    }
                }
                i += 3;
            }
            c => {
                if matches!(mode, Mode::Host | Mode::Zone) && c < 0x80 && should_escape(c, mode) {
                    return Err(format!(
                        "invalid character {} in host name",
                        go_quote(&String::from_utf8_lossy(&s[i..i + 1]))
                    ));
                }
                i += 1;
            }
        }
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' => {
                out.push((unhex(s[i + 1]) << 4) | unhex(s[i + 2]));
                i += 3;
            }
            b'+' if mode == Mode::QueryComponent => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

fn escape(s: &[u8], mode: Mode) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len());
    for &c in s {
        if c == b' ' && mode == Mode::QueryComponent {
            out.push('+');
        } else if should_escape(c, mode) {
            out.push('%');
            out.push(HEX[usize::from(c >> 4)] as char);
            out.push(HEX[usize::from(c & 15)] as char);
        } else {
            out.push(c as char);
        }
    }
    out
}

fn valid_encoded(s: &str, mode: Mode) -> bool {
    s.bytes().all(|c| {
        matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'['
                | b']'
                | b'%'
        ) || !should_escape(c, mode)
    })
}

fn valid_optional_port(port: &str) -> bool {
    port.is_empty() || (port.starts_with(':') && port[1..].bytes().all(|b| b.is_ascii_digit()))
}

fn valid_userinfo(s: &str) -> bool {
    s.chars().all(|r| {
        r.is_ascii_alphanumeric()
            || matches!(
                r,
                '-' | '.'
                    | '_'
                    | ':'
                    | '~'
                    | '!'
                    | '$'
                    | '&'
                    | '\''
                    | '('
                    | ')'
                    | '*'
                    | '+'
                    | ','
                    | ';'
                    | '='
                    | '%'
                    | '@'
            )
    })
}

/// `getScheme`: the scheme and the rest, or an error for a leading colon.
fn scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i == 0 => return Ok(("", raw)),
            b'0'..=b'9' | b'+' | b'-' | b'.' => {}
            b':' if i == 0 => return Err("missing protocol scheme".to_owned()),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

fn parse_host(host: &str) -> Result<String, String> {
    if host.starts_with('[') {
        let Some(i) = host.rfind(']') else { return Err("missing ']' in host".to_owned()) };
        let colon_port = &host[i + 1..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", go_quote(colon_port)));
        }
        if let Some(zone) = host[..i].find("%25") {
            let mut out = unescape(&host.as_bytes()[..zone], Mode::Host)?;
            out.extend(unescape(&host.as_bytes()[zone..i], Mode::Zone)?);
            out.extend(unescape(&host.as_bytes()[i..], Mode::Host)?);
            return Ok(String::from_utf8_lossy(&out).into_owned());
        }
    } else if let Some(i) = host.rfind(':') {
        let colon_port = &host[i..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", go_quote(colon_port)));
        }
    }
    Ok(String::from_utf8_lossy(&unescape(host.as_bytes(), Mode::Host)?).into_owned())
}

fn parse_authority(authority: &str) -> Result<String, String> {
    let Some(i) = authority.rfind('@') else { return parse_host(authority) };
    let host = parse_host(&authority[i + 1..])?;
    let userinfo = &authority[..i];
    if !valid_userinfo(userinfo) {
        return Err("net/url: invalid userinfo".to_owned());
    }
    match userinfo.split_once(':') {
        None => {
            unescape(userinfo.as_bytes(), Mode::UserPassword)?;
        }
        Some((user, password)) => {
            unescape(user.as_bytes(), Mode::UserPassword)?;
            unescape(password.as_bytes(), Mode::UserPassword)?;
        }
    }
    Ok(host)
}

/// Go's `parse(rawURL, viaRequest)`: the URL, or the error `url.Error` wraps.
fn parse(raw: &str, via_request: bool) -> Result<Url, String> {
    if raw.bytes().any(|b| b < b' ' || b == 0x7f) {
        return Err("net/url: invalid control character in URL".to_owned());
    }
    if raw.is_empty() && via_request {
        return Err("empty url".to_owned());
    }
    let mut url = Url::default();
    if raw == "*" {
        url.path = b"*".to_vec();
        return Ok(url);
    }
    let (scheme, rest) = scheme(raw)?;
    url.scheme = scheme.to_lowercase();
    let mut rest = rest;
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        rest = &rest[..rest.len() - 1];
    } else if let Some((before, query)) = rest.split_once('?') {
        url.raw_query = query.to_owned();
        rest = before;
    }
    if !rest.starts_with('/') {
        if !url.scheme.is_empty() {
            // An opaque URL (`mailto:x`): no host, path or escaped path.
            return Ok(url);
        }
        if via_request {
            return Err("invalid URI for request".to_owned());
        }
        if rest.split('/').next().is_some_and(|segment| segment.contains(':')) {
            return Err("first path segment in URL cannot contain colon".to_owned());
        }
    }
    if (!url.scheme.is_empty() || (!via_request && !rest.starts_with("///"))) && rest.starts_with("//") {
        let authority_and_path = &rest[2..];
        let (authority, path) = match authority_and_path.find('/') {
            Some(i) => authority_and_path.split_at(i),
            None => (authority_and_path, ""),
        };
        url.host = parse_authority(authority)?;
        rest = path;
    }
    url.path = unescape(rest.as_bytes(), Mode::Path)?;
    url.raw_path = if escape(&url.path, Mode::Path) == rest { String::new() } else { rest.to_owned() };
    Ok(url)
}

/// `url.ParseRequestURI`.
pub fn parse_request_uri(raw: &str) -> Result<Url, String> {
    parse(raw, true).map_err(|e| format!("parse {}: {e}", go_quote(raw)))
}

/// `url.Parse` (the fragment is checked and dropped: the library has no getter for it).
fn parse_reference(raw: &str) -> Result<Url, String> {
    let (before, fragment) = raw.split_once('#').unwrap_or((raw, ""));
    let url = parse(before, false).map_err(|e| format!("parse {}: {e}", go_quote(before)))?;
    if !fragment.is_empty() {
        unescape(fragment.as_bytes(), Mode::Fragment).map_err(|e| format!("parse {}: {e}", go_quote(raw)))?;
    }
    Ok(url)
}

impl Url {
    /// `EscapedPath`.
    fn escaped_path(&self) -> String {
        if !self.raw_path.is_empty()
            && valid_encoded(&self.raw_path, Mode::Path)
            && unescape(self.raw_path.as_bytes(), Mode::Path).ok().as_deref() == Some(self.path.as_slice())
        {
            return self.raw_path.clone();
        }
        if self.path == b"*" {
            return "*".to_owned();
        }
        escape(&self.path, Mode::Path)
    }

    /// `splitHostPort`: host (brackets removed) and port.
    fn host_port(&self) -> (&str, &str) {
        let mut host = self.host.as_str();
        let mut port = "";
        if let Some(colon) = host.rfind(':')
            && valid_optional_port(&host[colon..])
        {
            port = &host[colon + 1..];
            host = &host[..colon];
        }
        if host.starts_with('[') && host.ends_with(']') && host.len() >= 2 {
            host = &host[1..host.len() - 1];
        }
        (host, port)
    }

    /// `Query()`: `parseQuery` keeping the valid pairs.
    fn query(&self) -> HashMap<String, Vec<String>> {
        let mut out: HashMap<String, Vec<String>> = HashMap::new();
        for pair in self.raw_query.split('&') {
            if pair.contains(';') || pair.is_empty() {
                continue;
            }
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let (Ok(key), Ok(value)) =
                (unescape(key.as_bytes(), Mode::QueryComponent), unescape(value.as_bytes(), Mode::QueryComponent))
            else {
                continue;
            };
            out.entry(String::from_utf8_lossy(&key).into_owned())
                .or_default()
                .push(String::from_utf8_lossy(&value).into_owned());
        }
        out
    }
}

/// Registers the library on `env`.
pub fn register(env: &mut Env) -> Result<(), cel::DeclarationError> {
    env.add_overload("url", "string_to_url", vec![STRING_TYPE], to_url)?;
    env.add_overload("isURL", "is_url_string", vec![STRING_TYPE], is_url)?;
    env.add_member_overload("getScheme", "url_get_scheme", url_type(), vec![], get_scheme)?;
    env.add_member_overload("getHost", "url_get_host", url_type(), vec![], get_host)?;
    env.add_member_overload("getHostname", "url_get_hostname", url_type(), vec![], get_hostname)?;
    env.add_member_overload("getPort", "url_get_port", url_type(), vec![], get_port)?;
    env.add_member_overload("getEscapedPath", "url_get_escaped_path", url_type(), vec![], get_escaped_path)?;
    env.add_member_overload("getQuery", "url_get_query", url_type(), vec![], get_query)?;
    Ok(())
}

fn string_arg(args: &[CowVal<'_, '_>]) -> Result<String, ExecutionError> {
    match values(args)?.into_iter().next() {
        Some(Value::String(s)) => Ok(s.as_str().to_owned()),
        _ => Err(error(NO_SUCH_OVERLOAD)),
    }
}

fn url_arg(args: &[CowVal<'_, '_>]) -> Result<Url, ExecutionError> {
    match values(args)?.into_iter().next() {
        Some(Value::Opaque(o)) => o.downcast_ref::<Url>().cloned().ok_or_else(|| error(NO_SUCH_OVERLOAD)),
        _ => Err(error(NO_SUCH_OVERLOAD)),
    }
}

fn to_url<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let raw = string_arg(&args)?;
    let parsed = parse_request_uri(&raw)
        .and_then(|_| parse_reference(&raw))
        .map_err(|e| error(format!("URL parse error during conversion from string: {e}")))?;
    Value::Opaque(Arc::new(parsed)).into_resolve_result()
}

fn is_url<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Value::Bool(parse_request_uri(&string_arg(&args)?).is_ok()).into_resolve_result()
}

fn get_scheme<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Value::from(url_arg(&args)?.scheme).into_resolve_result()
}

fn get_host<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Value::from(url_arg(&args)?.host).into_resolve_result()
}

fn get_hostname<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let url = url_arg(&args)?;
    Value::from(url.host_port().0.to_owned()).into_resolve_result()
}

fn get_port<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let url = url_arg(&args)?;
    Value::from(url.host_port().1.to_owned()).into_resolve_result()
}

fn get_escaped_path<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Value::from(url_arg(&args)?.escaped_path()).into_resolve_result()
}

fn get_query<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let query: HashMap<String, Value> = url_arg(&args)?
        .query()
        .into_iter()
        .map(|(k, v)| (k, Value::List(Arc::new(v.into_iter().map(Value::from).collect()))))
        .collect();
    Value::from(query).into_resolve_result()
}

/// The opaque type of the values (`Type` is not `Clone`).
fn url_type() -> Type {
    Type::new_opaque_type("kubernetes.URL")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_uris_are_checked_as_go_checks_them() {
        for good in ["https://user:pass@example.com:80/path?query=val#fragment", "/absolute-path", "*", "mailto:x@y"] {
            assert!(parse_request_uri(good).is_ok(), "{good}");
        }
        for (bad, error) in [
            ("https://a:b:c/", "parse \"https://a:b:c/\": invalid port \":c\" after host"),
            ("../relative-path", "parse \"../relative-path\": invalid URI for request"),
            ("", "parse \"\": empty url"),
            (":x", "parse \":x\": missing protocol scheme"),
            ("http://x/%zz", "parse \"http://x/%zz\": invalid URL escape \"%zz\""),
            ("http://a b/", "parse \"http://a b/\": invalid character \" \" in host name"),
            ("http://[::1/", "parse \"http://[::1/\": missing ']' in host"),
            ("http://x\ty", "parse \"http://x\\ty\": net/url: invalid control character in URL"),
        ] {
            assert_eq!(parse_request_uri(bad).unwrap_err(), error, "{bad}");
        }
    }

    #[test]
    fn parts_read_as_go_reads_them() {
        let url = parse_reference("https://[::1]:80/path with spaces/?k1=a&k2=b&k2=c&x;y=1&q=a+b%20c").unwrap();
        assert_eq!(url.host, "[::1]:80");
        assert_eq!(url.host_port(), ("::1", "80"));
        assert_eq!(url.escaped_path(), "/path%20with%20spaces/");
        let query = url.query();
        assert_eq!(query["k2"], vec!["b", "c"]);
        assert_eq!(query["q"], vec!["a b c"]);
        assert!(!query.contains_key("x;y"));
        assert_eq!(parse_reference("https://example.com").unwrap().escaped_path(), "");
        assert_eq!(parse_reference("https://example.com/a%2fb").unwrap().escaped_path(), "/a%2fb");
        assert_eq!(parse_reference("HTTPS://example.com:/").unwrap().scheme, "https");
        assert_eq!(parse_reference("https://example.com:/").unwrap().host_port(), ("example.com", ""));
    }
}
