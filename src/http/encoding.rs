//! Content-coding negotiation (RFC 9110 §12.5.3) for precompressed siblings: given the
//! request's `Accept-Encoding` and the codings the server is configured to look for, which
//! sibling (`x.br`, `x.zst`, `x.gz`) to try first.
//!
//! Rules of [`acceptable`]:
//! - Codings are matched case-insensitively; `x-gzip` is `gzip` (RFC 9110 §8.4.1.3).
//! - Weights are read by [`super::weighted::items`]: a valid qvalue (`0`, `0.x` up to three
//!   decimals, `1`, `1.000`), else the element is ignored whole; other parameters are ignored.
//!   `q=0` means "not acceptable".
//! - `*` gives its weight to every coding the field does not name.
//! - A coding named more than once gets its lowest weight: refusing a coding the client may
//!   have wanted only costs bytes, serving one it refused breaks the response.
//! - The result is ordered by weight, ties broken by the server's `preference` order.
//! - No `Accept-Encoding` field, or an empty one, yields nothing. RFC 9110 would let a server
//!   send any coding to a client that sent no field, but clients that omit it (scripts,
//!   `curl` without `--compressed`) expect the bytes of the file, and identity is always
//!   allowed.
//! - `identity` (and `identity;q=0`, or `*;q=0`) does not change which codings are acceptable.
//!   When the client refuses identity and no acceptable variant exists, the caller still serves
//!   identity: proactive negotiation lets a server disregard the preference and send a default
//!   rather than 406 (RFC 9110 §12.1, §12.5.3), and that is what browsers cope with best.
//!
//! Invariants: never panics on input; the output holds each coding of `preference` at most
//! once, and only codings whose weight is above zero.

/// A content coding the server can serve from a precompressed sibling file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Br,
    Zstd,
    Gzip,
}

impl Encoding {
    /// The content-coding token, as in `Content-Encoding`: `br`, `zstd`, `gzip`.
    pub fn token(self) -> &'static str {
        match self {
            Encoding::Br => "br",
            Encoding::Zstd => "zstd",
            Encoding::Gzip => "gzip",
        }
    }

    /// The file name suffix of the sibling: `.br`, `.zst`, `.gz`.
    pub fn suffix(self) -> &'static str {
        match self {
            Encoding::Br => ".br",
            Encoding::Zstd => ".zst",
            Encoding::Gzip => ".gz",
        }
    }

    /// The coding named in the configuration (`"br"`, `"zstd"`, `"gzip"`), exactly.
    pub fn from_config(s: &str) -> Option<Encoding> {
        match s {
            "br" => Some(Encoding::Br),
            "zstd" => Some(Encoding::Zstd),
            "gzip" => Some(Encoding::Gzip),
            _ => None,
        }
    }

    /// The coding of a token from `Accept-Encoding`, case-insensitively; `x-gzip` is gzip.
    fn from_token(t: &[u8]) -> Option<Encoding> {
        if t.eq_ignore_ascii_case(b"br") {
            Some(Encoding::Br)
        } else if t.eq_ignore_ascii_case(b"zstd") {
            Some(Encoding::Zstd)
        } else if t.eq_ignore_ascii_case(b"gzip") || t.eq_ignore_ascii_case(b"x-gzip") {
            Some(Encoding::Gzip)
        } else {
            None
        }
    }

    /// A small index per coding (0, 1, 2), for arrays of per-coding state.
    pub fn index(self) -> usize {
        match self {
            Encoding::Br => 0,
            Encoding::Zstd => 1,
            Encoding::Gzip => 2,
        }
    }
}

/// Fills `out` (cleared first) with the codings of `preference` the client accepts, best first
/// (see the module documentation).
pub fn acceptable(accept_encoding: Option<&[u8]>, preference: &[Encoding], out: &mut Vec<Encoding>) {
    out.clear();
    let Some(field) = accept_encoding else {
        return;
    };
    // Weights in thousandths, per coding (indexed by `Encoding::index`) and for `*`.
    let mut weight: [Option<u16>; 3] = [None; 3];
    let mut star: Option<u16> = None;
    for (coding, q) in super::weighted::items(field) {
        let slot = if coding == b"*" {
            &mut star
        } else if let Some(e) = Encoding::from_token(coding) {
            &mut weight[e.index()]
        } else {
            continue;
        };
        *slot = Some(slot.map_or(q, |old| old.min(q)));
    }

    let mut seen = [false; 3];
    for &e in preference {
        if std::mem::replace(&mut seen[e.index()], true) {
            continue;
        }
        if weight[e.index()].or(star).is_some_and(|q| q > 0) {
            out.push(e);
        }
    }
    // Stable: equal weights keep the preference order.
    out.sort_by_key(|e| std::cmp::Reverse(weight[e.index()].or(star).unwrap_or(0)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use Encoding::{Br, Gzip, Zstd};

    const ALL: &[Encoding] = &[Br, Zstd, Gzip];

    fn acc(h: &str, pref: &[Encoding]) -> Vec<Encoding> {
        let mut out = vec![Gzip; 5];
        acceptable(Some(h.as_bytes()), pref, &mut out);
        out
    }

    #[test]
    fn tokens() {
        for e in [Br, Zstd, Gzip] {
            assert_eq!(Encoding::from_config(e.token()), Some(e));
            assert!(e.suffix().starts_with('.'));
        }
        assert_eq!(Encoding::from_config("BR"), None);
        assert_eq!(Encoding::from_config("deflate"), None);
        assert_eq!(Gzip.suffix(), ".gz");
        assert_eq!(Zstd.suffix(), ".zst");
        assert_eq!(Br.token(), "br");
    }

    #[test]
    fn absent_or_empty() {
        let mut out = vec![Br];
        acceptable(None, ALL, &mut out);
        assert!(out.is_empty());
        assert!(acc("", ALL).is_empty());
        assert!(acc(" , ", ALL).is_empty());
        assert!(acc("identity", ALL).is_empty());
    }

    #[test]
    fn browser_headers() {
        assert_eq!(acc("gzip, deflate, br, zstd", ALL), vec![Br, Zstd, Gzip]);
        assert_eq!(acc("gzip, deflate, br", ALL), vec![Br, Gzip]);
        assert_eq!(acc("gzip, deflate", ALL), vec![Gzip]);
        // The server's preference breaks ties.
        assert_eq!(acc("gzip, br", &[Gzip, Br]), vec![Gzip, Br]);
        // Only configured codings are offered.
        assert_eq!(acc("gzip, br, zstd", &[Gzip]), vec![Gzip]);
        assert!(acc("gzip, br", &[]).is_empty());
    }

    #[test]
    fn q_values() {
        assert_eq!(acc("br;q=0.5, gzip;q=0.8", ALL), vec![Gzip, Br]);
        assert_eq!(acc("br;q=1.0, gzip;q=0.999", ALL), vec![Br, Gzip]);
        assert_eq!(acc("br;q=0, gzip", ALL), vec![Gzip]);
        assert_eq!(acc("br;q=0.000, gzip;q=0.001", ALL), vec![Gzip]);
        assert_eq!(acc("gzip;q=1, br;q=1.000", ALL), vec![Br, Gzip]);
        assert_eq!(acc("gzip ; q=0.5 , br ;Q=0.4", ALL), vec![Gzip, Br]);
        // The lowest weight of a repeated coding counts.
        assert_eq!(acc("gzip, gzip;q=0", ALL), vec![]);
        assert_eq!(acc("br;q=0.1, br;q=0.9, gzip;q=0.5", ALL), vec![Gzip, Br]);
        // Other parameters are ignored.
        assert_eq!(acc("gzip;level=9", ALL), vec![Gzip]);
    }

    #[test]
    fn malformed_weights_drop_the_element() {
        for h in
            ["br;q=1.5", "br;q=2", "br;q=0.1234", "br;q=", "br;q=.5", "br;q=abc", "br;q=1.001", "br;q=-1", "br;q=0.5x"]
        {
            assert_eq!(acc(&format!("{h}, gzip"), ALL), vec![Gzip], "{h}");
        }
        // A dropped element does not count as a refusal either.
        assert_eq!(acc("*;q=0.5, br;q=nope", ALL), vec![Br, Zstd, Gzip]);
    }

    #[test]
    fn star() {
        assert_eq!(acc("*", ALL), vec![Br, Zstd, Gzip]);
        assert_eq!(acc("*;q=0", ALL), vec![]);
        assert_eq!(acc("gzip, *;q=0", ALL), vec![Gzip]);
        assert_eq!(acc("br;q=0, *", ALL), vec![Zstd, Gzip]);
        assert_eq!(acc("*;q=0.5, gzip", ALL), vec![Gzip, Br, Zstd]);
        assert_eq!(acc("*;q=0.5, gzip;q=0.1", ALL), vec![Br, Zstd, Gzip]);
    }

    #[test]
    fn identity_does_not_matter() {
        assert_eq!(acc("identity;q=0, gzip", ALL), vec![Gzip]);
        assert_eq!(acc("identity;q=0", ALL), vec![]);
        assert_eq!(acc("br, identity", ALL), vec![Br]);
    }

    #[test]
    fn case_whitespace_aliases_and_junk() {
        assert_eq!(acc("GZIP, Br", ALL), vec![Br, Gzip]);
        assert_eq!(acc("x-gzip", ALL), vec![Gzip]);
        assert_eq!(acc("X-GZIP;q=0.5, zstd", ALL), vec![Zstd, Gzip]);
        assert_eq!(acc("  \tgzip  ,\t br\t", ALL), vec![Br, Gzip]);
        assert_eq!(acc(",,gzip,,", ALL), vec![Gzip]);
        assert_eq!(acc("compress, deflate, bzip2, gzi p, brotli", ALL), vec![]);
        assert_eq!(acc(";;;, =, ;q=1, gzip", ALL), vec![Gzip]);
        let mut out = Vec::new();
        acceptable(Some(b"\xff\xfe, br;q=\xff, gzip"), ALL, &mut out);
        assert_eq!(out, vec![Gzip]);
    }

    #[test]
    fn duplicate_preferences() {
        assert_eq!(acc("gzip, br", &[Gzip, Gzip, Br, Br]), vec![Gzip, Br]);
    }
}
