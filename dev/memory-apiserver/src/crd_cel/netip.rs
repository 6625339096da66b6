//! IP addresses and prefixes as Go's `net/netip` parses and prints them, which the Kubernetes IP and CIDR
//! libraries of CEL are built on.
//!
//! Ported from golang/go `src/net/netip/netip.go` (`ParseAddr`, `parseIPv4`, `parseIPv6`, `parseAddrError`,
//! `ParsePrefix`, `Addr.String`, `Prefix.Masked`, `Prefix.Contains`, `Is4In6`, `IsLoopback`,
//! `IsLinkLocalUnicast`, `IsLinkLocalMulticast`, `IsMulticast`, `IsGlobalUnicast`): the same addresses are valid
//! and the errors read the same (`ParseAddr("1.2.3"): IPv4 address too short`).

use std::fmt::{self, Write as _};
use std::net::{Ipv4Addr, Ipv6Addr};

/// An address: IPv4, or IPv6 (an IPv4-mapped IPv6 address stays IPv6, as in Go).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Addr {
    /// 4 bytes.
    V4([u8; 4]),
    /// 16 bytes.
    V6([u8; 16]),
}

/// Go's `strconv.Quote` for the strings these errors quote.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `parseAddrError.Error()`.
fn parse_error(input: &str, message: &str, at: &str) -> String {
    if at.is_empty() {
        format!("ParseAddr({}): {message}", go_quote(input))
    } else {
        format!("ParseAddr({}): {message} (at {})", go_quote(input), go_quote(at))
    }
}

/// `netip.ParseAddr`: the address and its zone (empty without one), or Go's error text.
pub fn parse_addr(s: &str) -> Result<(Addr, String), String> {
    for b in s.bytes() {
        match b {
            b'.' => return parse_ipv4(s).map(|a| (Addr::V4(a), String::new())),
            b':' => return parse_ipv6(s),
            b'%' => return Err(parse_error(s, "missing IPv6 address", "")),
            _ => {}
        }
    }
    Err(parse_error(s, "unable to parse IP", ""))
}

fn parse_ipv4(s: &str) -> Result<[u8; 4], String> {
    let bytes = s.as_bytes();
    let mut fields = [0u8; 4];
    let (mut val, mut pos, mut digits) = (0u32, 0usize, 0usize);
    for i in 0..bytes.len() {
        let c = bytes[i];
        if c.is_ascii_digit() {
            if digits == 1 && val == 0 {
                return Err(parse_error(s, "IPv4 field has octet with leading zero", ""));
            }
            val = val * 10 + u32::from(c - b'0');
            digits += 1;
            if val > 255 {
                return Err(parse_error(s, "IPv4 field has value >255", ""));
            }
        } else if c == b'.' {
            if i == 0 || i == bytes.len() - 1 || bytes[i - 1] == b'.' {
                return Err(parse_error(s, "IPv4 field must have at least one digit", &s[i..]));
            }
            if pos == 3 {
                return Err(parse_error(s, "IPv4 address too long", ""));
            }
            fields[pos] = val as u8;
            pos += 1;
            val = 0;
            digits = 0;
        } else {
            return Err(parse_error(s, "unexpected character", s.get(i..).unwrap_or_default()));
        }
    }
    if pos < 3 {
        return Err(parse_error(s, "IPv4 address too short", ""));
    }
    fields[3] = val as u8;
    Ok(fields)
}

fn parse_ipv6(input: &str) -> Result<(Addr, String), String> {
    let (mut s, zone) = match input.find('%') {
        Some(i) => {
            let zone = &input[i + 1..];
            if zone.is_empty() {
                return Err(parse_error(input, "zone must be a non-empty string", ""));
            }
            (&input[..i], zone.to_owned())
        }
        None => (input, String::new()),
    };
    let mut ip = [0u8; 16];
    let mut ellipsis: Option<usize> = None;
    if s.len() >= 2 && s.starts_with("::") {
        ellipsis = Some(0);
        s = &s[2..];
        if s.is_empty() {
            return Ok((Addr::V6(ip), zone));
        }
    }
    let mut i = 0usize;
    while i < 16 {
        let bytes = s.as_bytes();
        let mut off = 0usize;
        let mut acc = 0u32;
        while off < bytes.len() {
            let c = bytes[off];
            let digit = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => break,
            };
            acc = (acc << 4) + u32::from(digit);
            if acc > 0xffff {
                return Err(parse_error(input, "IPv6 field has value >=2^16", s));
            }
            off += 1;
        }
        if off == 0 {
            return Err(parse_error(input, "each colon-separated field must have at least one digit", s));
        }
        if off < bytes.len() && bytes[off] == b'.' {
            if ellipsis.is_none() && i != 12 {
                return Err(parse_error(
                    input,
                    "embedded IPv4 address must replace the final 2 fields of the address",
                    s,
                ));
            }
            if i + 4 > 16 {
                return Err(parse_error(
                    input,
                    "too many hex fields to fit an embedded IPv4 at the end of the address",
                    s,
                ));
            }
            let v4 = parse_ipv4(s).map_err(|e| parse_error(input, &e, s))?;
            ip[i..i + 4].copy_from_slice(&v4);
            s = "";
            i += 4;
            break;
        }
        ip[i] = (acc >> 8) as u8;
        ip[i + 1] = acc as u8;
        i += 2;
        s = &s[off..];
        if s.is_empty() {
            break;
        }
        if !s.starts_with(':') {
            return Err(parse_error(input, "unexpected character, want colon", s));
        } else if s.len() == 1 {
            return Err(parse_error(input, "colon must be followed by more characters", s));
        }
        s = &s[1..];
        if s.starts_with(':') {
            if ellipsis.is_some() {
                return Err(parse_error(input, "multiple :: in address", s));
            }
            ellipsis = Some(i);
            s = &s[1..];
            if s.is_empty() {
                break;
            }
        }
    }
    if !s.is_empty() {
        return Err(parse_error(input, "trailing garbage after address", s));
    }
    if i < 16 {
        let Some(ellipsis) = ellipsis else {
            return Err(parse_error(input, "address string too short", ""));
        };
        let n = 16 - i;
        for j in (ellipsis..i).rev() {
            ip[j + n] = ip[j];
        }
        for b in ip.iter_mut().skip(ellipsis).take(n) {
            *b = 0;
        }
    } else if ellipsis.is_some() {
        return Err(parse_error(input, "the :: must expand to at least one field of zeros", ""));
    }
    Ok((Addr::V6(ip), zone))
}

impl Addr {
    /// `Is4In6`: `::ffff:a.b.c.d`.
    pub fn is_4in6(&self) -> bool {
        matches!(self, Addr::V6(b) if b[..10].iter().all(|x| *x == 0) && b[10] == 0xff && b[11] == 0xff)
    }

    /// The address with an IPv4-mapped IPv6 address unmapped (`Unmap`).
    fn unmapped(&self) -> Addr {
        match self {
            Addr::V6(b) if self.is_4in6() => Addr::V4([b[12], b[13], b[14], b[15]]),
            other => *other,
        }
    }

    /// The number of bits: 32 or 128.
    pub fn bit_len(&self) -> u32 {
        match self {
            Addr::V4(_) => 32,
            Addr::V6(_) => 128,
        }
    }

    fn as_u128(&self) -> u128 {
        match self {
            Addr::V4(b) => u128::from(u32::from_be_bytes(*b)),
            Addr::V6(b) => u128::from_be_bytes(*b),
        }
    }

    fn from_u128(v4: bool, value: u128) -> Addr {
        if v4 { Addr::V4((value as u32).to_be_bytes()) } else { Addr::V6(value.to_be_bytes()) }
    }

    /// `IsUnspecified`: `0.0.0.0` or `::`.
    pub fn is_unspecified(&self) -> bool {
        self.as_u128() == 0
    }

    /// `IsLoopback`.
    pub fn is_loopback(&self) -> bool {
        match self.unmapped() {
            Addr::V4(b) => b[0] == 127,
            Addr::V6(b) => u128::from_be_bytes(b) == 1,
        }
    }

    /// `IsMulticast`.
    fn is_multicast(&self) -> bool {
        match self.unmapped() {
            Addr::V4(b) => b[0] & 0xf0 == 0xe0,
            Addr::V6(b) => b[0] == 0xff,
        }
    }

    /// `IsLinkLocalUnicast`.
    pub fn is_link_local_unicast(&self) -> bool {
        match self.unmapped() {
            Addr::V4(b) => b[0] == 169 && b[1] == 254,
            Addr::V6(b) => u16::from_be_bytes([b[0], b[1]]) & 0xffc0 == 0xfe80,
        }
    }

    /// `IsLinkLocalMulticast`.
    pub fn is_link_local_multicast(&self) -> bool {
        match self.unmapped() {
            Addr::V4(b) => b[0] == 224 && b[1] == 0 && b[2] == 0,
            Addr::V6(b) => u16::from_be_bytes([b[0], b[1]]) & 0xff0f == 0xff02,
        }
    }

    /// `IsGlobalUnicast`.
    pub fn is_global_unicast(&self) -> bool {
        let ip = self.unmapped();
        if let Addr::V4(b) = ip
            && (b == [0, 0, 0, 0] || b == [255, 255, 255, 255])
        {
            return false;
        }
        ip != Addr::V6([0; 16]) && !ip.is_loopback() && !ip.is_multicast() && !ip.is_link_local_unicast()
    }
}

impl fmt::Display for Addr {
    /// `Addr.String`: dotted decimal, or RFC 5952 IPv6 (`::ffff:1.2.3.4` for an IPv4-mapped one).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::V4(b) => write!(f, "{}", Ipv4Addr::from(*b)),
            Addr::V6(b) => write!(f, "{}", Ipv6Addr::from(*b)),
        }
    }
}

/// A prefix: an address (host bits kept, as `ParsePrefix` keeps them) and a length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// The address as written.
    pub addr: Addr,
    /// The prefix length.
    pub bits: u32,
}

/// `netip.ParsePrefix`, or Go's error text.
pub fn parse_prefix(s: &str) -> Result<Prefix, String> {
    let quoted = go_quote(s);
    let Some(i) = s.rfind('/') else {
        return Err(format!("netip.ParsePrefix({quoted}): no '/'"));
    };
    let (addr, zone) = parse_addr(&s[..i]).map_err(|e| format!("netip.ParsePrefix({quoted}): {e}"))?;
    if !zone.is_empty() {
        return Err(format!("netip.ParsePrefix({quoted}): IPv6 zones cannot be present in a prefix"));
    }
    let bits_text = &s[i + 1..];
    let bits = go_atoi(bits_text)
        .ok_or_else(|| format!("netip.ParsePrefix({quoted}): bad bits after slash: {}", go_quote(bits_text)))?;
    if !(0..=i64::from(addr.bit_len())).contains(&bits) {
        return Err(format!("netip.ParsePrefix({quoted}): prefix length out of range"));
    }
    Ok(Prefix { addr, bits: bits as u32 })
}

/// `strconv.Atoi`: an optional sign and decimal digits.
fn go_atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl Prefix {
    fn mask(&self) -> u128 {
        let width = self.addr.bit_len();
        if self.bits == 0 {
            return 0;
        }
        let ones = u128::MAX << (128 - self.bits);
        if width == 32 { ones >> 96 } else { ones }
    }

    /// `Masked`: the host bits cleared.
    pub fn masked(&self) -> Prefix {
        let v4 = matches!(self.addr, Addr::V4(_));
        Prefix { addr: Addr::from_u128(v4, self.addr.as_u128() & self.mask()), bits: self.bits }
    }

    /// `Contains`: same family and the first `bits` bits equal.
    pub fn contains(&self, ip: &Addr) -> bool {
        if self.addr.bit_len() != ip.bit_len() {
            return false;
        }
        (ip.as_u128() ^ self.addr.as_u128()) & self.mask() == 0
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_fail_as_go_does() {
        assert_eq!(parse_addr("127.0.0.1"), Ok((Addr::V4([127, 0, 0, 1]), String::new())));
        assert_eq!(parse_addr("::1").map(|(a, _)| a.to_string()).as_deref(), Ok("::1"));
        assert_eq!(parse_addr("2001:DB8::0:0:0:ABCD").map(|(a, _)| a.to_string()).as_deref(), Ok("2001:db8::abcd"));
        assert_eq!(parse_addr("fe80::1%eth0").map(|(_, z)| z).as_deref(), Ok("eth0"));
        assert_eq!(parse_addr("::ffff:1.2.3.4").map(|(a, _)| a.is_4in6()), Ok(true));
        for (bad, error) in [
            ("127.0.0.256", "ParseAddr(\"127.0.0.256\"): IPv4 field has value >255"),
            (":::1", "ParseAddr(\":::1\"): each colon-separated field must have at least one digit (at \":1\")"),
            ("1.2.3", "ParseAddr(\"1.2.3\"): IPv4 address too short"),
            ("01.2.3.4", "ParseAddr(\"01.2.3.4\"): IPv4 field has octet with leading zero"),
            ("1..2.3", "ParseAddr(\"1..2.3\"): IPv4 field must have at least one digit (at \".2.3\")"),
            ("abc", "ParseAddr(\"abc\"): unable to parse IP"),
            ("1:2:3:4:5:6:7:8:9", "ParseAddr(\"1:2:3:4:5:6:7:8:9\"): trailing garbage after address (at \"9\")"),
            ("1::2::3", "ParseAddr(\"1::2::3\"): multiple :: in address (at \":3\")"),
            ("1:2", "ParseAddr(\"1:2\"): address string too short"),
        ] {
            assert_eq!(parse_addr(bad).unwrap_err(), error, "{bad}");
        }
    }

    #[test]
    fn prefixes_parse_mask_and_contain_as_go_does() {
        let p = parse_prefix("192.168.0.1/24").unwrap();
        assert_eq!(p.to_string(), "192.168.0.1/24");
        assert_eq!(p.masked().to_string(), "192.168.0.0/24");
        assert!(p.contains(&Addr::V4([192, 168, 0, 200])));
        assert!(!p.contains(&Addr::V4([192, 168, 1, 1])));
        assert_eq!(parse_prefix("2001:db8::1/32").unwrap().masked().to_string(), "2001:db8::/32");
        assert_eq!(parse_prefix("0.0.0.0/0").unwrap().masked().to_string(), "0.0.0.0/0");
        assert_eq!(parse_prefix("10.0.0.0").unwrap_err(), "netip.ParsePrefix(\"10.0.0.0\"): no '/'");
        assert_eq!(
            parse_prefix("10.0.0.0/33").unwrap_err(),
            "netip.ParsePrefix(\"10.0.0.0/33\"): prefix length out of range"
        );
        assert_eq!(
            parse_prefix("10.0.0.0/x").unwrap_err(),
            "netip.ParsePrefix(\"10.0.0.0/x\"): bad bits after slash: \"x\""
        );
        assert_eq!(
            parse_prefix("1.2.3/8").unwrap_err(),
            "netip.ParsePrefix(\"1.2.3/8\"): ParseAddr(\"1.2.3\"): IPv4 address too short"
        );
    }

    #[test]
    fn address_classes_follow_netip() {
        let ip = |s: &str| parse_addr(s).unwrap().0;
        assert!(ip("0.0.0.0").is_unspecified() && ip("::").is_unspecified() && !ip("::1").is_unspecified());
        assert!(ip("127.0.0.1").is_loopback() && ip("::1").is_loopback() && !ip("192.168.0.1").is_loopback());
        assert!(ip("224.0.0.1").is_link_local_multicast() && !ip("224.0.1.1").is_link_local_multicast());
        assert!(ip("ff02::1").is_link_local_multicast() && !ip("fd00::1").is_link_local_multicast());
        assert!(ip("169.254.169.254").is_link_local_unicast() && ip("fe80::1").is_link_local_unicast());
        assert!(!ip("fd80::1").is_link_local_unicast());
        assert!(ip("192.168.0.1").is_global_unicast() && !ip("255.255.255.255").is_global_unicast());
        assert!(ip("2001:db8::abcd").is_global_unicast() && !ip("ff00::1").is_global_unicast());
    }
}
