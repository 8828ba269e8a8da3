//! The PROXY protocol (HAProxy's, versions 1 and 2): the header a load balancer or proxy
//! sends on a new connection before any byte of the client's, naming the client's address.
//! A listener named in `[server] proxy_protocol` expects it on every connection, before the
//! request (or, on a `[tls] listen` address, before the TLS ClientHello).
//!
//! [`parse`] is pure: it looks at the bytes received so far and says whether they are a
//! complete header (and how long it is, so exactly that much is consumed), the start of one,
//! or not one at all. It never reads past its input and never panics; it is unit-tested,
//! property-tested and fuzzed (`fuzz/fuzz_targets/proxy.rs`).
//!
//! * **Version 1** (text): `PROXY TCP4 <src> <dst> <sport> <dport>\r\n`, `TCP6` likewise, or
//!   `PROXY UNKNOWN<anything>\r\n`; at most [`V1_MAX`] bytes with the CRLF. Fields are
//!   separated by exactly one space; addresses are strict (`Ipv4Addr`/`Ipv6Addr` syntax, of
//!   the family named), ports are decimal numbers up to 65535 without a sign.
//! * **Version 2** (binary): the 12-byte signature, a version/command byte (version 2;
//!   `LOCAL` or `PROXY`), a family/protocol byte and a 16-bit length of what follows, at most
//!   [`V2_MAX`] bytes in all. `PROXY` over `TCP/IPv4` or `TCP/IPv6` gives the source address;
//!   `LOCAL` (the proxy's own health checks) and the unspecified or `AF_UNIX` families mean
//!   "use the connection's own address". UDP over IPv4/IPv6 cannot describe a TCP
//!   connection and is refused, as is a version, command, family or protocol the
//!   specification does not define. TLVs after the addresses are skipped unread.
//!
//! A source of `None` ([`Header::source`]) means the connection's real peer stays the client.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The longest version 1 header, CRLF included (the specification's figure).
pub const V1_MAX: usize = 107;
/// The longest version 2 header accepted (16 bytes of fixed part, addresses and TLVs).
pub const V2_MAX: usize = 4096;
/// The version 2 signature.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
const V1_PREFIX: &[u8] = b"PROXY ";

/// A complete header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Bytes of the input the header takes; the client's own bytes follow.
    pub len: usize,
    /// The client's address and port, or `None` to keep the connection's own (`LOCAL`,
    /// `UNKNOWN`, an unspecified or `AF_UNIX` family).
    pub source: Option<SocketAddr>,
}

/// What the bytes received so far amount to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A complete header.
    Done(Header),
    /// A valid start of a header: more bytes are needed.
    Incomplete,
}

/// Why the bytes are not a PROXY header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Neither signature: the peer did not send a header (a client talking to the listener
    /// directly, or a proxy without the protocol on).
    NoHeader,
    /// A version 1 line that breaks the grammar, or longer than [`V1_MAX`].
    BadV1,
    /// A version 2 header with an undefined version, command, family or protocol, or an
    /// address block shorter than its family needs.
    BadV2,
    /// A version 2 header longer than [`V2_MAX`] (or than the caller can hold).
    TooLong,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Error::NoHeader => "no PROXY protocol header",
            Error::BadV1 => "malformed PROXY protocol v1 header",
            Error::BadV2 => "malformed PROXY protocol v2 header",
            Error::TooLong => "PROXY protocol v2 header too long",
        })
    }
}

/// Parses the start of a connection's input. `Incomplete` is only returned for a strict
/// prefix of some valid header; once the bytes can no longer become one, it is an error.
pub fn parse(buf: &[u8]) -> Result<Parsed, Error> {
    if buf.is_empty() {
        return Ok(Parsed::Incomplete);
    }
    let n = buf.len().min(V2_SIGNATURE.len());
    if buf[..n] == V2_SIGNATURE[..n] {
        return parse_v2(buf);
    }
    let n = buf.len().min(V1_PREFIX.len());
    if buf[..n] == V1_PREFIX[..n] {
        return parse_v1(buf);
    }
    Err(Error::NoHeader)
}

fn parse_v1(buf: &[u8]) -> Result<Parsed, Error> {
    let window = &buf[..buf.len().min(V1_MAX)];
    let Some(cr) = window.iter().position(|&b| b == b'\r' || b == b'\n') else {
        return if buf.len() >= V1_MAX { Err(Error::BadV1) } else { v1_prefix_ok(buf) };
    };
    // The line ends with CRLF; a bare LF, or a CR followed by anything else, is refused.
    match window.get(cr..cr + 2) {
        Some(b"\r\n") => {}
        // A CR that may be followed by its LF: as incomplete as the line before it.
        None if window[cr] == b'\r' && cr + 1 == buf.len() => return v1_prefix_ok(&buf[..cr]),
        _ => return Err(Error::BadV1),
    }
    let line = &buf[V1_PREFIX.len()..cr];
    let source = v1_fields(line).ok_or(Error::BadV1)?;
    Ok(Parsed::Done(Header { len: cr + 2, source }))
}

/// The fields after `PROXY `: the source, or `None` for `UNKNOWN`.
fn v1_fields(line: &[u8]) -> Option<Option<SocketAddr>> {
    if line == b"UNKNOWN" || line.starts_with(b"UNKNOWN ") {
        // "UNKNOWN", then anything (the receiver must ignore it) up to the CRLF.
        return Some(None);
    }
    let mut it = line.split(|&b| b == b' ');
    let proto = it.next()?;
    let (src, dst) = (it.next()?, it.next()?);
    let (sport, dport) = (it.next()?, it.next()?);
    if it.next().is_some() {
        return None;
    }
    fn text(b: &[u8]) -> Option<&str> {
        std::str::from_utf8(b).ok()
    }
    let src: IpAddr = match proto {
        b"TCP4" => IpAddr::V4(text(src)?.parse::<Ipv4Addr>().ok()?),
        b"TCP6" => IpAddr::V6(text(src)?.parse::<Ipv6Addr>().ok()?),
        _ => return None,
    };
    let dst = text(dst)?;
    let dst_ok = match proto {
        b"TCP4" => dst.parse::<Ipv4Addr>().is_ok(),
        _ => dst.parse::<Ipv6Addr>().is_ok(),
    };
    if !dst_ok {
        return None;
    }
    let sport = port(sport)?;
    port(dport)?;
    Some(Some(SocketAddr::new(src, sport)))
}

/// A decimal port: 1 to 5 digits, at most 65535.
fn port(b: &[u8]) -> Option<u16> {
    if b.is_empty() || b.len() > 5 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// Whether an unterminated v1 line (shorter than the maximum) can still become a valid
/// header: it only holds the bytes a header may hold, and its protocol word, as far as it
/// goes, is one of the three.
fn v1_prefix_ok(buf: &[u8]) -> Result<Parsed, Error> {
    let rest = &buf[buf.len().min(V1_PREFIX.len())..];
    let word_end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
    let word = &rest[..word_end];
    let known = [&b"TCP4"[..], b"TCP6", b"UNKNOWN"].iter().any(|w| {
        if word_end == rest.len() {
            w.starts_with(word)
        } else {
            *w == word
        }
    });
    // UNKNOWN's trailing text is free; the TCP forms hold only address and port characters.
    let tcp_chars = |b: &u8| b.is_ascii_hexdigit() || matches!(b, b'.' | b':' | b' ');
    let ok = known && (word == b"UNKNOWN" || rest[word_end..].iter().all(tcp_chars));
    if ok {
        Ok(Parsed::Incomplete)
    } else {
        Err(Error::BadV1)
    }
}

fn parse_v2(buf: &[u8]) -> Result<Parsed, Error> {
    if buf.len() < 16 {
        // Check what has arrived of the version/command and family bytes already.
        if let Some(&vc) = buf.get(12) {
            v2_command(vc)?;
        }
        if let Some(&fp) = buf.get(13) {
            v2_family(fp)?;
        }
        return Ok(Parsed::Incomplete);
    }
    let local = v2_command(buf[12])?;
    let (family, protocol) = v2_family(buf[13])?;
    let body = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let len = 16 + body;
    if len > V2_MAX {
        return Err(Error::TooLong);
    }
    // The address block's size for the family; a LOCAL header's addresses are ignored.
    let need = match family {
        1 => 12,
        2 => 36,
        3 => 216,
        _ => 0,
    };
    if !local && body < need {
        return Err(Error::BadV2);
    }
    if buf.len() < len {
        return Ok(Parsed::Incomplete);
    }
    if local {
        return Ok(Parsed::Done(Header { len, source: None }));
    }
    let a = &buf[16..len];
    let source = match (family, protocol) {
        (1, 1) => {
            let ip = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be_bytes([a[8], a[9]])))
        }
        (2, 1) => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&a[..16]);
            Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(o)), u16::from_be_bytes([a[32], a[33]])))
        }
        _ => None,
    };
    Ok(Parsed::Done(Header { len, source }))
}

/// The version/command byte: version 2, then LOCAL (true) or PROXY (false).
fn v2_command(b: u8) -> Result<bool, Error> {
    match b {
        0x20 => Ok(true),
        0x21 => Ok(false),
        _ => Err(Error::BadV2),
    }
}

/// The family/protocol byte: family 0-3 (unspecified, IPv4, IPv6, unix), protocol 0-2
/// (unspecified, stream, datagram), but not datagrams over IP.
fn v2_family(b: u8) -> Result<(u8, u8), Error> {
    let (family, protocol) = (b >> 4, b & 0x0f);
    // UDP over IPv4 or IPv6 cannot be the connection this header arrived on.
    if family > 3 || protocol > 2 || (matches!(family, 1 | 2) && protocol == 2) {
        return Err(Error::BadV2);
    }
    Ok((family, protocol))
}

/// Renders a version 1 header (for tests and tools): `None` gives `PROXY UNKNOWN`.
pub fn v1(source: Option<SocketAddr>, dest: SocketAddr) -> Vec<u8> {
    match source {
        Some(s) => {
            let proto = if s.is_ipv4() { "TCP4" } else { "TCP6" };
            format!("PROXY {proto} {} {} {} {}\r\n", s.ip(), dest.ip(), s.port(), dest.port()).into_bytes()
        }
        None => b"PROXY UNKNOWN\r\n".to_vec(),
    }
}

/// Renders a version 2 header (for tests and tools): `None` gives a `LOCAL` command; `tlvs`
/// is appended after the addresses as is. `source` and `dest` must be of one family.
pub fn v2(source: Option<SocketAddr>, dest: SocketAddr, tlvs: &[u8]) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    let mut addrs = Vec::new();
    let fam = match (source, dest) {
        (Some(SocketAddr::V4(s)), SocketAddr::V4(d)) => {
            addrs.extend(s.ip().octets());
            addrs.extend(d.ip().octets());
            addrs.extend(s.port().to_be_bytes());
            addrs.extend(d.port().to_be_bytes());
            0x11
        }
        (Some(s), d) => {
            let v6 = |a: SocketAddr| match a.ip() {
                IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                IpAddr::V6(v6) => v6.octets(),
            };
            addrs.extend(v6(s));
            addrs.extend(v6(d));
            addrs.extend(s.port().to_be_bytes());
            addrs.extend(d.port().to_be_bytes());
            0x21
        }
        (None, _) => 0x00,
    };
    out.push(if source.is_some() { 0x21 } else { 0x20 });
    out.push(fam);
    let body = u16::try_from(addrs.len() + tlvs.len()).unwrap_or(u16::MAX);
    out.extend(body.to_be_bytes());
    out.extend(addrs);
    out.extend_from_slice(tlvs);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn done(len: usize, source: Option<&str>) -> Result<Parsed, Error> {
        Ok(Parsed::Done(Header { len, source: source.map(sa) }))
    }

    #[test]
    fn v1_headers() {
        let h = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET / HTTP/1.1\r\n";
        assert_eq!(parse(h), done(45, Some("192.0.2.1:56324")));
        let h = b"PROXY TCP6 2001:db8::1 ::1 65535 80\r\n";
        assert_eq!(parse(h), done(h.len(), Some("[2001:db8::1]:65535")));
        assert_eq!(parse(b"PROXY UNKNOWN\r\n"), done(15, None));
        assert_eq!(parse(b"PROXY UNKNOWN ffff::1 ::1 1 2\r\nx"), done(31, None));
        // The longest lines are accepted (TCP6's, and UNKNOWN with the same fields, which is
        // the specification's maximum); one byte more is not.
        let long = b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
        assert_eq!(parse(long), done(104, Some("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535")));
        let longest = [&b"PROXY UNKNOWN"[..], &long[10..]].concat();
        assert_eq!(longest.len(), V1_MAX);
        assert_eq!(parse(&longest), done(V1_MAX, None));
        let mut unknown = b"PROXY UNKNOWN ".to_vec();
        unknown.resize(V1_MAX - 2, b'x');
        unknown.extend(b"\r\n");
        assert!(matches!(parse(&unknown), Ok(Parsed::Done(_))));
        unknown.insert(20, b'x');
        assert_eq!(parse(&unknown), Err(Error::BadV1));
    }

    #[test]
    fn v1_refusals() {
        for bad in [
            &b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\n"[..],
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\rX",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443 9\r\n",
            b"PROXY TCP4  192.0.2.1 198.51.100.2 56324 443\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 65536 443\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 +1 443\r\n",
            b"PROXY TCP4 192.0.2.1 198.51.100.2 1 \r\n",
            b"PROXY TCP4 2001:db8::1 198.51.100.2 1 2\r\n",
            b"PROXY TCP6 192.0.2.1 ::1 1 2\r\n",
            b"PROXY TCP6 ::1 192.0.2.1 1 2\r\n",
            b"PROXY TCP4 192.0.2.01 198.51.100.2 1 2\r\n",
            b"PROXY UDP4 192.0.2.1 198.51.100.2 1 2\r\n",
            b"PROXY \r\n",
            b"PROXY tcp4 192.0.2.1 198.51.100.2 1 2\r\n",
        ] {
            assert_eq!(parse(bad), Err(Error::BadV1), "{}", String::from_utf8_lossy(bad));
        }
        // Not a header at all.
        for bad in [&b"GET / HTTP/1.1\r\n"[..], b"PROXX", b"\x16\x03\x01", b"proxy TCP4"] {
            assert_eq!(parse(bad), Err(Error::NoHeader));
        }
        // No CRLF within the maximum.
        assert_eq!(parse(&[b"PROXY TCP4 ".as_slice(), &[b'1'; 120]].concat()), Err(Error::BadV1));
        // A start that can no longer become a header is refused at once, not waited on.
        assert_eq!(parse(b"PROXY TCP5"), Err(Error::BadV1));
        assert_eq!(parse(b"PROXY TCP4 1.2.3.4 GET"), Err(Error::BadV1));
        // Also when it ends with a CR that could be the line's end (found by the fuzzer:
        // the line without its CR was refused, the line with it waited for more).
        assert_eq!(parse(b"PROXY UPROXY / HTT\x01\0\0\x001920\r"), Err(Error::BadV1));
        assert_eq!(parse(b"PROXY TCP4 1.2.3.4 GET\r"), Err(Error::BadV1));
    }

    #[test]
    fn v1_prefixes_wait_for_more() {
        let h = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n";
        for n in 0..h.len() {
            assert_eq!(parse(&h[..n]), Ok(Parsed::Incomplete), "{n}");
        }
    }

    #[test]
    fn v2_headers() {
        let d4 = sa("198.51.100.2:443");
        let h = v2(Some(sa("192.0.2.1:56324")), d4, &[]);
        assert_eq!(h.len(), 28);
        assert_eq!(parse(&h), done(28, Some("192.0.2.1:56324")));
        let h6 = v2(Some(sa("[2001:db8::1]:1234")), sa("[::1]:443"), &[]);
        assert_eq!(parse(&h6), done(52, Some("[2001:db8::1]:1234")));
        // TLVs are skipped, and the bytes after the header are the client's.
        let tlv = [0x01, 0x00, 0x02, b'h', b'2', 0x04, 0x00, 0x00];
        let mut h = v2(Some(sa("192.0.2.1:1")), d4, &tlv);
        let len = h.len();
        h.extend(b"GET /");
        assert_eq!(parse(&h), done(len, Some("192.0.2.1:1")));
        // LOCAL: the connection's own address, whatever the family byte and length say.
        assert_eq!(parse(&v2(None, d4, &[])), done(16, None));
        let mut local = v2(Some(sa("192.0.2.1:1")), d4, &[]);
        local[12] = 0x20;
        assert_eq!(parse(&local), done(28, None));
        // Unspecified and unix families keep the connection's address.
        let mut unspec = V2_SIGNATURE.to_vec();
        unspec.extend([0x21, 0x00, 0x00, 0x03, 1, 2, 3]);
        assert_eq!(parse(&unspec), done(19, None));
        let mut unix = V2_SIGNATURE.to_vec();
        unix.extend([0x21, 0x31, 0x00, 0xd8]);
        unix.resize(16 + 216, 0);
        assert_eq!(parse(&unix), done(232, None));
    }

    #[test]
    fn v2_refusals() {
        let good = v2(Some(sa("192.0.2.1:56324")), sa("198.51.100.2:443"), &[]);
        let with = |i: usize, b: u8| {
            let mut h = good.clone();
            h[i] = b;
            h
        };
        // Version 1 or 3, command 2; family 4, protocol 3; UDP.
        for (i, b) in [(12, 0x11), (12, 0x31), (12, 0x22), (13, 0x41), (13, 0x13), (13, 0x12), (13, 0x22)] {
            assert_eq!(parse(&with(i, b)), Err(Error::BadV2), "byte {i} = {b:#x}");
            // Refused as soon as the byte arrives, without waiting for the rest.
            assert_eq!(parse(&with(i, b)[..i + 1]), Err(Error::BadV2), "byte {i} = {b:#x}");
        }
        // An address block shorter than the family needs.
        let mut short = good.clone();
        short[15] = 11;
        assert_eq!(parse(&short), Err(Error::BadV2));
        // Longer than the bound.
        let mut long = good.clone();
        long[14] = 0x10;
        long[15] = 0x00;
        assert_eq!(parse(&long[..16]), Err(Error::TooLong));
        // A broken signature is no header.
        assert_eq!(parse(&with(11, b'X')), Err(Error::NoHeader));
    }

    #[test]
    fn v2_prefixes_wait_for_more() {
        let h = v2(Some(sa("[2001:db8::1]:1234")), sa("[::1]:443"), &[7, 0, 1, 9]);
        for n in 0..h.len() {
            assert_eq!(parse(&h[..n]), Ok(Parsed::Incomplete), "{n}");
        }
    }

    proptest! {
        /// Whatever the bytes: no panic, a header never claims more than the input, and an
        /// input that waits for more is no longer than the largest header.
        #[test]
        fn never_past_the_input(bytes in prop::collection::vec(any::<u8>(), 0..600), sig in 0u8..3) {
            let mut input = match sig {
                0 => V2_SIGNATURE.to_vec(),
                1 => b"PROXY ".to_vec(),
                _ => Vec::new(),
            };
            input.extend(bytes);
            match parse(&input) {
                Ok(Parsed::Done(h)) => prop_assert!(h.len <= input.len() && h.len <= V2_MAX),
                Ok(Parsed::Incomplete) => prop_assert!(input.len() < V2_MAX),
                Err(_) => {}
            }
        }

        /// A rendered header parses back to its source, whole, at its length, whatever
        /// follows it; every strict prefix of it waits for more.
        #[test]
        fn rendered_headers_round_trip(
            v6 in any::<bool>(), a in any::<u128>(), b in any::<u128>(), sp in any::<u16>(), dp in any::<u16>(),
            text in any::<bool>(), tail in prop::collection::vec(any::<u8>(), 0..40),
            tlvs in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let ip = |x: u128| if v6 { IpAddr::V6(Ipv6Addr::from(x)) } else { IpAddr::V4(Ipv4Addr::from(x as u32)) };
            let (src, dst) = (SocketAddr::new(ip(a), sp), SocketAddr::new(ip(b), dp));
            let h = if text { v1(Some(src), dst) } else { v2(Some(src), dst, &tlvs) };
            let mut input = h.clone();
            input.extend(&tail);
            prop_assert_eq!(parse(&input), Ok(Parsed::Done(Header { len: h.len(), source: Some(src) })));
            for n in 0..h.len() {
                prop_assert_eq!(parse(&h[..n]), Ok(Parsed::Incomplete));
            }
        }
    }
}
