//! Weighted lists (RFC 9110 §12.4.2): the `token;q=value` elements of `Accept` and
//! `Accept-Encoding`, as [`super::media`], [`super::encoding`] and directory listings'
//! format choice read them.
//!
//! Rules of [`items`]:
//! - Elements are comma-separated, trimmed, empty ones skipped ([`super::list_items`]).
//! - An element's token is what precedes its first `;`, trimmed; it is returned as sent
//!   (callers match it case-insensitively, as tokens and media types are).
//! - A parameter named `q` (case-insensitively, whitespace around the name and value
//!   tolerated) is the weight, in thousandths; without one the weight is 1000. Other
//!   parameters, and parameters without `=`, are ignored; of several `q`, the last counts.
//! - A weight that is not a valid qvalue ([`qvalue`]) drops the element whole: it neither
//!   accepts nor refuses anything. `q=0` is returned (it means "not acceptable").
//!
//! Invariants: never panics on input; every weight returned is at most 1000.

/// The elements of a weighted list: (token, weight in thousandths), in the order sent,
/// without those whose weight is malformed.
pub fn items(field: &[u8]) -> impl Iterator<Item = (&[u8], u16)> {
    super::list_items(field).filter_map(|item| {
        let mut params = item.split(|&b| b == b';');
        let token = params.next().unwrap_or_default().trim_ascii();
        let mut q = Some(1000);
        for param in params {
            let Some(eq) = param.iter().position(|&b| b == b'=') else {
                continue;
            };
            if param[..eq].trim_ascii().eq_ignore_ascii_case(b"q") {
                q = qvalue(param[eq + 1..].trim_ascii());
            }
        }
        Some((token, q?))
    })
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in thousandths.
pub fn qvalue(v: &[u8]) -> Option<u16> {
    let (int, frac) = match v.iter().position(|&b| b == b'.') {
        Some(dot) => (&v[..dot], &v[dot + 1..]),
        None => (v, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |&d| u16::from(d - b'0'));
    }
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Vec<(String, u16)> {
        items(s.as_bytes()).map(|(t, q)| (String::from_utf8_lossy(t).into_owned(), q)).collect()
    }

    fn one(t: &str, q: u16) -> Vec<(String, u16)> {
        vec![(t.to_string(), q)]
    }

    #[test]
    fn missing_q_is_one_and_q_zero_is_kept() {
        assert_eq!(parse("gzip"), one("gzip", 1000));
        assert_eq!(parse("gzip;q=0"), one("gzip", 0));
        assert_eq!(parse("gzip;q=0.000"), one("gzip", 0));
        assert_eq!(
            parse("br;q=0.5, gzip, *;q=0.001"),
            vec![("br".into(), 500), ("gzip".into(), 1000), ("*".into(), 1)]
        );
    }

    #[test]
    fn valid_qvalues() {
        for (v, q) in [("0", 0), ("0.", 0), ("0.5", 500), ("0.05", 50), ("0.125", 125), ("1", 1000), ("1.", 1000)] {
            assert_eq!(qvalue(v.as_bytes()), Some(q), "{v}");
        }
        assert_eq!(qvalue(b"1.000"), Some(1000));
        assert_eq!(qvalue(b"0.999"), Some(999));
    }

    #[test]
    fn invalid_q_drops_the_element() {
        for bad in ["2", "1.5", "1.001", "0.1234", "", ".5", "-1", "abc", "0.5x", "01", " 0 . 5", "\u{ff}"] {
            assert_eq!(qvalue(bad.as_bytes()), None, "{bad:?}");
            assert_eq!(parse(&format!("br;q={bad}, gzip")), one("gzip", 1000), "{bad:?}");
        }
    }

    #[test]
    fn whitespace_case_and_other_parameters() {
        assert_eq!(parse("  gzip ; Q = 0.5 \t"), one("gzip", 500));
        assert_eq!(parse("IMAGE/AVIF;q=0.9"), one("IMAGE/AVIF", 900), "the token as sent");
        assert_eq!(parse("image/avif;level=1;q=0.3"), one("image/avif", 300));
        assert_eq!(parse("text/html;charset=utf-8"), one("text/html", 1000));
        // A parameter without `=`, and `q` as a value rather than a name, do not count.
        assert_eq!(parse("gzip;q;x=q"), one("gzip", 1000));
        // Of several weights, the last.
        assert_eq!(parse("gzip;q=0.1;q=0.2"), one("gzip", 200));
        assert_eq!(parse("gzip;q=0.1;q=x"), vec![]);
    }

    #[test]
    fn empty_elements_and_junk() {
        assert_eq!(parse(""), vec![]);
        assert_eq!(parse(" , ,, "), vec![]);
        assert_eq!(parse(";q=0.5"), one("", 500), "an empty token is the caller's to ignore");
        assert_eq!(parse(",,gzip,,"), one("gzip", 1000));
        assert_eq!(parse("=;=, ;;;"), vec![("=".into(), 1000), ("".into(), 1000)]);
    }

    proptest::proptest! {
        #[test]
        fn never_panics_weights_at_most_one(s in "[ -~]{0,80}") {
            for (token, q) in items(s.as_bytes()) {
                proptest::prop_assert!(q <= 1000);
                proptest::prop_assert!(!token.contains(&b',') && !token.contains(&b';'));
            }
        }
    }
}
