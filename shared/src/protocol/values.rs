//! Validated values of protocol annotations.

use super::{ProtocolError, Result};
use jiff::Timestamp;
use std::fmt;

fn malformed(key: &'static str, value: &str, reason: &'static str) -> ProtocolError {
    ProtocolError::Malformed { key, value: value.to_owned(), reason }
}

/// An intent token: 1 to 32 characters of `[a-z0-9]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(String);

impl Token {
    pub const MAX_LEN: usize = 32;

    /// Validates `value` as the token of annotation `key`.
    pub fn parse(key: &'static str, value: &str) -> Result<Self> {
        if value.is_empty() || value.len() > Self::MAX_LEN {
            return Err(malformed(key, value, "a token has 1 to 32 characters"));
        }
        if !value.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
            return Err(malformed(key, value, "a token has only the characters a-z and 0-9"));
        }
        Ok(Token(value.to_owned()))
    }

    /// The length of a [`Token::fresh`] token: 20 characters of 36 (about 103 random bits).
    pub const FRESH_LEN: usize = 20;

    /// A fresh random token of [`Token::FRESH_LEN`] characters drawn from `rand`'s thread-local generator
    /// (ChaCha seeded by the operating system): unique across writers and restarts without any shared state.
    pub fn fresh() -> Self {
        use rand::Rng;
        const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
        let mut rng = rand::rng();
        Token((0..Self::FRESH_LEN).map(|_| char::from(DIGITS[rng.random_range(0..DIGITS.len())])).collect())
    }

    /// A token from a number (base 36), for deterministic writers (simulations and tests) that count tokens.
    pub fn from_u64(mut n: u64) -> Self {
        const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
        let mut out = Vec::with_capacity(13);
        loop {
            out.push(DIGITS[(n % 36) as usize]);
            n /= 36;
            if n == 0 {
                break;
            }
        }
        out.reverse();
        Token(out.into_iter().map(char::from).collect())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A host boot ID (a UUID on Linux; 1 to 64 characters of `[A-Za-z0-9-]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BootId(String);

impl BootId {
    pub fn parse(key: &'static str, value: &str) -> Result<Self> {
        if value.is_empty() || value.len() > 64 || !value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(malformed(key, value, "a boot ID has 1 to 64 characters of A-Z, a-z, 0-9 and -"));
        }
        Ok(BootId(value.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BootId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `sha256:` followed by 64 lowercase hex digits: the hash over the hashes of a node's
/// Kubernetes components.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ComponentsHash(String);

impl ComponentsHash {
    pub fn parse(key: &'static str, value: &str) -> Result<Self> {
        let hex = value
            .strip_prefix("sha256:")
            .ok_or_else(|| malformed(key, value, "a components hash starts with sha256:"))?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(malformed(key, value, "a components hash has 64 lowercase hex digits after sha256:"));
        }
        Ok(ComponentsHash(value.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ComponentsHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A ConfigMap name as the API server accepts it (a DNS subdomain: at most 253 characters of `a-z`, `0-9`, `-`
/// and `.`, starting and ending with a letter or digit).
pub(super) fn parse_config_map_name(key: &'static str, value: &str) -> Result<String> {
    let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let bytes = value.as_bytes();
    if value.is_empty()
        || value.len() > 253
        || !bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'.')
        || !edge(bytes.first())
        || !edge(bytes.last())
    {
        return Err(malformed(key, value, "a ConfigMap name has 1 to 253 characters of a-z, 0-9, - and ."));
    }
    Ok(value.to_owned())
}

/// A regular expression (RE2 and Rust `regex` syntax) that matches exactly the non-empty strings
/// [`parse_target`] accepts, up to the length limit: no control character (`\p{Cc}`) anywhere,
/// and no white space at either end. Unicode white space is the control characters `\t\n\v\f\r`
/// and U+0085 together with the separators `\p{Z}`, so "not white space and not a control
/// character" is `[^\p{Z}\p{Cc}]`. The CRD's `spec.image` carries this pattern with
/// `maxLength` [`super::MAX_TARGET_LEN`], so the API server refuses what the protocol could not carry.
pub const TARGET_PATTERN: &str = r"^[^\p{Z}\p{Cc}]([^\p{Cc}]*[^\p{Z}\p{Cc}])?$";

/// An image reference, version or OS name: non-empty, at most [`super::MAX_TARGET_LEN`]
/// characters (as the API server counts `maxLength`), no control characters and no surrounding
/// white space.
pub fn parse_target(key: &'static str, value: &str) -> Result<String> {
    if value.is_empty() {
        return Err(malformed(key, value, "must not be empty"));
    }
    if value.chars().count() > super::MAX_TARGET_LEN {
        return Err(malformed(key, value, "longer than 1024 characters"));
    }
    if value.chars().any(char::is_control) {
        return Err(malformed(key, value, "contains control characters"));
    }
    if value.trim() != value {
        return Err(malformed(key, value, "has leading or trailing white space"));
    }
    Ok(value.to_owned())
}

/// Timestamps are RFC 3339 in UTC with milliseconds (`2026-11-21T10:00:00.250Z`), so that a
/// deadline counted from one never fires early; whole seconds are read too.
pub(super) fn parse_timestamp(key: &'static str, value: &str) -> Result<Timestamp> {
    value.parse().map_err(|_| malformed(key, value, "not an RFC 3339 timestamp"))
}

pub fn render_timestamp(ts: Timestamp) -> String {
    truncate_to_millis(ts).strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// `ts` without its fraction of a millisecond. Writers stamp intents with this so that what they
/// keep in memory equals what they read back.
pub fn truncate_to_millis(ts: Timestamp) -> Timestamp {
    Timestamp::from_millisecond(ts.as_millisecond()).unwrap_or(ts)
}

/// `ts` without its fraction of a second, as Kubernetes `Time` fields keep it.
pub fn truncate_to_seconds(ts: Timestamp) -> Timestamp {
    Timestamp::from_second(ts.as_second()).unwrap_or(ts)
}

/// Cuts `text` to at most `max` bytes at a character boundary (annotation messages, Event notes).
pub fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Cuts a message to [`super::MAX_MESSAGE_LEN`] bytes at a character boundary.
pub(super) fn cut_message(message: &str) -> String {
    cut(message, super::MAX_MESSAGE_LEN).to_owned()
}
