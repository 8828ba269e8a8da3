//! An address range ("10.0.0.0/8", "::1"): who may see the status page (`[status] allow`) and
//! which peers are trusted to name the client (`trusted_proxies`, [`super::forwarded`]).

use std::net::IpAddr;

/// An allowed client network: an address and a prefix length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Net {
    addr: IpAddr,
    prefix: u8,
}

impl Net {
    /// Parses "127.0.0.0/8", "::1", "10.1.2.3".
    pub fn parse(s: &str) -> Option<Net> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p.trim().parse::<u8>().ok().filter(|&p| p <= max)?,
            None => max,
        };
        Some(Net { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(&n.octets(), &a.octets(), self.prefix),
            (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(&n.octets(), &a.octets(), self.prefix),
            _ => false,
        }
    }
}

fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let full = usize::from(bits / 8);
    let rest = bits % 8;
    if a[..full] != b[..full] {
        return false;
    }
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[full] & mask == b[full] & mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nets() {
        let n = Net::parse("127.0.0.0/8").unwrap();
        assert!(n.contains("127.1.2.3".parse().unwrap()));
        assert!(n.contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!n.contains("128.0.0.1".parse().unwrap()));
        let n = Net::parse("::1").unwrap();
        assert!(n.contains("::1".parse().unwrap()));
        assert!(!n.contains("::2".parse().unwrap()));
        assert!(Net::parse("10.0.0.0/33").is_none());
        assert!(Net::parse("nope").is_none());
        assert!(Net::parse("10.0.0.0/12").unwrap().contains("10.15.255.255".parse().unwrap()));
        assert!(!Net::parse("10.0.0.0/12").unwrap().contains("10.16.0.0".parse().unwrap()));
    }
}
