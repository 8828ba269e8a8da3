//! The client's address behind trusted proxies (`[server] trusted_proxies`), from
//! `Forwarded` (RFC 7239, its `for=` parameters) or, without it, `X-Forwarded-For`.
//!
//! Only a peer in a trusted network is believed, and only as far as the chain stays
//! trusted: the list is walked from the right (the hop nearest to us), each address that is
//! itself a trusted proxy moves one hop further, and the first untrusted address is the
//! client. If every hop is trusted, the leftmost one is. A hop that is not an address
//! (`unknown`, an obfuscated `_name`, garbage, a `Forwarded` element without `for=`) stops
//! the walk at the last address reached. A header sent more than once is ignored (the
//! parser hands it over empty), so the walk never has to guess how the lines join.
//! Nothing allocates.

use std::net::{IpAddr, SocketAddr};

use super::net::Net;

/// The address to log and to check the status ACL against.
pub fn client(peer: IpAddr, trusted: &[Net], forwarded: Option<&[u8]>, x_forwarded_for: Option<&[u8]>) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(peer) {
        return peer;
    }
    let mut client = peer;
    let mut step = |hop: Option<IpAddr>| -> Option<IpAddr> {
        match hop {
            Some(ip) if is_trusted(ip) => {
                client = ip;
                None
            }
            Some(ip) => Some(ip),
            None => Some(client),
        }
    };
    if let Some(v) = forwarded {
        for element in v.rsplit(|&b| b == b',') {
            if let Some(found) = step(forwarded_for(element)) {
                return found;
            }
        }
    } else if let Some(v) = x_forwarded_for {
        for item in v.rsplit(|&b| b == b',') {
            if let Some(found) = step(address(item.trim_ascii())) {
                return found;
            }
        }
    }
    client
}

/// The `for=` address of one `Forwarded` element (`for=192.0.2.1;proto=https`).
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    element.split(|&b| b == b';').find_map(|pair| {
        let pair = pair.trim_ascii();
        let (name, value) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
        if !name.trim_ascii().eq_ignore_ascii_case(b"for") {
            return None;
        }
        let value = value[1..].trim_ascii();
        let value = value.strip_prefix(b"\"").and_then(|v| v.strip_suffix(b"\"")).unwrap_or(value);
        address(value)
    })
}

/// `192.0.2.1`, `192.0.2.1:8080`, `2001:db8::1`, `[2001:db8::1]` or `[2001:db8::1]:8080`.
fn address(s: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(s).ok()?;
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return inner.parse::<IpAddr>().ok().map(|ip| ip.to_canonical());
    }
    s.parse::<SocketAddr>().ok().map(|a| a.ip().to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<Net> {
        list.iter().map(|n| Net::parse(n).unwrap()).collect()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn untrusted_peers_are_never_believed() {
        let t = nets(&["10.0.0.0/8"]);
        assert_eq!(client(ip("192.0.2.9"), &t, None, Some(b"1.2.3.4")), ip("192.0.2.9"));
        assert_eq!(client(ip("192.0.2.9"), &t, Some(b"for=1.2.3.4"), None), ip("192.0.2.9"));
        assert_eq!(client(ip("10.0.0.1"), &[], None, Some(b"1.2.3.4")), ip("10.0.0.1"));
    }

    #[test]
    fn the_chain_is_walked_from_the_right() {
        let t = nets(&["10.0.0.0/8", "::1"]);
        let peer = ip("10.0.0.1");
        // spoofed, real client, then two of our proxies.
        assert_eq!(client(peer, &t, None, Some(b"6.6.6.6, 203.0.113.7, 10.1.1.1,10.2.2.2")), ip("203.0.113.7"));
        assert_eq!(client(peer, &t, None, Some(b"203.0.113.7:4711")), ip("203.0.113.7"));
        assert_eq!(client(peer, &t, None, Some(b"[2001:db8::5]:80")), ip("2001:db8::5"));
        // Every hop trusted: the leftmost.
        assert_eq!(client(peer, &t, None, Some(b"10.9.9.9, 10.1.1.1")), ip("10.9.9.9"));
        // Garbage stops the walk at the last address reached.
        assert_eq!(client(peer, &t, None, Some(b"1.2.3.4, junk, 10.1.1.1")), ip("10.1.1.1"));
        assert_eq!(client(peer, &t, None, Some(b"")), peer);
        assert_eq!(client(peer, &t, None, None), peer);
        // IPv4-mapped peers count as IPv4.
        assert_eq!(client(ip("::ffff:10.0.0.1"), &t, None, Some(b"198.51.100.1")), ip("198.51.100.1"));
    }

    #[test]
    fn forwarded_wins_over_x_forwarded_for() {
        let t = nets(&["10.0.0.0/8"]);
        let peer = ip("10.0.0.1");
        let fwd = b"for=6.6.6.6, for=\"[2001:db8:cafe::17]:4711\";proto=https, For=10.3.3.3;by=10.0.0.1";
        assert_eq!(client(peer, &t, Some(fwd), Some(b"5.5.5.5")), ip("2001:db8:cafe::17"));
        assert_eq!(client(peer, &t, Some(b"for=unknown, for=10.3.3.3"), None), ip("10.3.3.3"));
        assert_eq!(client(peer, &t, Some(b"proto=https"), None), peer);
        assert_eq!(client(peer, &t, Some(b"for=_hidden"), None), peer);
    }
}
