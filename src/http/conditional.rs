//! Conditional requests (RFC 9110 §13): evaluates `If-Match`, `If-Unmodified-Since`,
//! `If-None-Match`, `If-Modified-Since` and `If-Range` against the validators of the selected
//! representation.
//!
//! [`evaluate`] is pure: it takes the raw field values and the representation's strong ETag
//! and modification time, and returns what to do. It follows the order of RFC 9110 §13.2.2
//! exactly:
//!
//! 1. `If-Match` (strong comparison; `*` matches, since the representation exists) fails → 412.
//! 2. Otherwise, without `If-Match`: `If-Unmodified-Since` is a valid date and the
//!    representation was modified after it → 412. Ignored when the modification time is unknown.
//! 3. `If-None-Match` (weak comparison; `*` matches) matches → 304 for GET/HEAD, 412 otherwise.
//! 4. Otherwise, without `If-None-Match`, for GET/HEAD: `If-Modified-Since` is a valid date and
//!    the representation was not modified after it → 304.
//! 5. `If-Range`: an entity tag must match by strong comparison (a weak tag never matches), a
//!    date must equal the modification time exactly; any other value, including a malformed one,
//!    does not match and the `Range` field is to be ignored (`use_range: false`). Whether a Range
//!    is present and the method is GET is the caller's business: without a Range field,
//!    `use_range` has no effect.
//!
//! Invariants: peer input never panics; an invalid HTTP-date is ignored (as if the field were
//! absent); a malformed entity-tag list matches nothing, so a malformed `If-Match` fails (412)
//! and a malformed `If-None-Match` is not satisfied (the request proceeds). A field that
//! appeared several times reaches this module joined with `", "`, which keeps a list a list and
//! makes two dates invalid (a date contains a comma), as RFC 9110 §13.1.3 requires.
//!
//! Deliberate simplifications: the server does not know the response `Date` here, so a
//! modification time equal to `If-Range`'s date is taken as strong (§8.8.2.2 would also require
//! it to be at least a second before `Date`; the caller guarantees `Last-Modified` never exceeds
//! `Date`, and the cost of a false match is at most a mixed-version resume of a file changed
//! within the same second). An `If-Modified-Since` date in the future is not treated specially.

use std::time::UNIX_EPOCH;

/// The validators of the selected representation.
pub struct Validators<'a> {
    /// The strong entity tag, quoted: `b"\"abc\""`. Empty if the representation has none.
    pub etag: &'a [u8],
    /// Modification time in seconds since the epoch; `None` if unknown.
    pub last_modified: Option<u64>,
}

/// Raw values of the precondition fields of a request. If a field appeared several times, the
/// caller joins the values with `", "`.
#[derive(Default)]
pub struct Conditions<'a> {
    pub if_match: Option<&'a [u8]>,
    pub if_none_match: Option<&'a [u8]>,
    pub if_modified_since: Option<&'a [u8]>,
    pub if_unmodified_since: Option<&'a [u8]>,
    pub if_range: Option<&'a [u8]>,
}

/// What the preconditions decide.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Go on with the request. `use_range` is false when `If-Range` did not match: any `Range`
    /// field must then be ignored and the full representation sent.
    Proceed { use_range: bool },
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    PreconditionFailed,
}

/// Evaluates the preconditions of a request in the order of RFC 9110 §13.2.2 (see the module
/// documentation). `is_get_or_head`: the request method is GET or HEAD.
pub fn evaluate(is_get_or_head: bool, c: &Conditions<'_>, v: &Validators<'_>) -> Outcome {
    // Our own tag is parsed only when a field compares with it: most requests carry none.
    let own = || parse_tag(v.etag.trim_ascii());

    // Step 1 and 2.
    if let Some(field) = c.if_match {
        if !list_matches(field, own(), Comparison::Strong) {
            return Outcome::PreconditionFailed;
        }
    } else if let (Some(field), Some(lm)) = (c.if_unmodified_since, v.last_modified) {
        if http_date(field).is_some_and(|date| lm > date) {
            return Outcome::PreconditionFailed;
        }
    }

    // Step 3 and 4.
    if let Some(field) = c.if_none_match {
        if list_matches(field, own(), Comparison::Weak) {
            return if is_get_or_head { Outcome::NotModified } else { Outcome::PreconditionFailed };
        }
    } else if let (true, Some(field), Some(lm)) = (is_get_or_head, c.if_modified_since, v.last_modified) {
        if http_date(field).is_some_and(|date| lm <= date) {
            return Outcome::NotModified;
        }
    }

    // Step 5.
    let use_range = match c.if_range {
        None => true,
        Some(field) => if_range_matches(field, own(), v.last_modified),
    };
    Outcome::Proceed { use_range }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Comparison {
    Strong,
    Weak,
}

/// An entity tag: `weak` for a `W/` prefix, `opaque` the quoted string including its quotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tag<'a> {
    weak: bool,
    opaque: &'a [u8],
}

impl Tag<'_> {
    /// RFC 9110 §8.8.3.2.
    fn matches(self, other: Tag<'_>, cmp: Comparison) -> bool {
        match cmp {
            Comparison::Strong => !self.weak && !other.weak && self.opaque == other.opaque,
            Comparison::Weak => self.opaque == other.opaque,
        }
    }
}

/// `etagc = %x21 / %x23-7E / obs-text`
fn is_etagc(b: u8) -> bool {
    b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80
}

/// Parses one entity tag at the start of `s`; returns it and the rest of `s`.
fn parse_tag_prefix(s: &[u8]) -> Option<(Tag<'_>, &[u8])> {
    let (weak, s) = match s.strip_prefix(b"W/") {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    if s.first() != Some(&b'"') {
        return None;
    }
    let close = 1 + s.get(1..)?.iter().position(|&b| b == b'"')?;
    let opaque = s.get(..=close)?;
    if !opaque[1..close].iter().all(|&b| is_etagc(b)) {
        return None;
    }
    Some((Tag { weak, opaque }, &s[close + 1..]))
}

/// Parses a value that must be exactly one entity tag.
fn parse_tag(s: &[u8]) -> Option<Tag<'_>> {
    match parse_tag_prefix(s) {
        Some((tag, [])) => Some(tag),
        _ => None,
    }
}

fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Whether the field value (`"*"` or a list of entity tags, RFC 9110 §13.1.1/§13.1.2) matches
/// the representation's tag `own`. `*` matches any existing representation, even one without a
/// tag. A malformed list matches nothing. Commas may occur inside an opaque tag, so the list is
/// scanned tag by tag rather than split on commas.
fn list_matches(field: &[u8], own: Option<Tag<'_>>, cmp: Comparison) -> bool {
    let field = field.trim_ascii();
    if field == b"*" {
        return true;
    }
    let mut rest = field;
    let mut matched = false;
    let mut any = false;
    loop {
        // Skip OWS and empty list elements.
        while let Some((&b, tail)) = rest.split_first() {
            if is_ows(b) || b == b',' {
                rest = tail;
            } else {
                break;
            }
        }
        if rest.is_empty() {
            break;
        }
        let Some((tag, tail)) = parse_tag_prefix(rest) else {
            return false;
        };
        any = true;
        if own.is_some_and(|own| own.matches(tag, cmp)) {
            matched = true;
        }
        // After a tag: OWS, then a comma or the end.
        let tail = tail.trim_ascii_start();
        match tail.first() {
            None => break,
            Some(b',') => rest = tail,
            Some(_) => return false,
        }
    }
    any && matched
}

/// Whether an `If-Range` value (one entity tag or one HTTP-date) matches (RFC 9110 §13.1.5).
fn if_range_matches(field: &[u8], own: Option<Tag<'_>>, last_modified: Option<u64>) -> bool {
    let field = field.trim_ascii();
    if field.starts_with(b"\"") || field.starts_with(b"W/") {
        return match (parse_tag(field), own) {
            (Some(tag), Some(own)) => own.matches(tag, Comparison::Strong),
            _ => false,
        };
    }
    match (http_date(field), last_modified) {
        (Some(date), Some(lm)) => date == lm,
        _ => false,
    }
}

/// Parses an HTTP-date (IMF-fixdate, or the obsolete RFC 850 and asctime forms) into seconds
/// since the epoch; `None` if it is not a valid date.
fn http_date(field: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(field.trim_ascii()).ok()?;
    let t = httpdate::parse_http_date(s).ok()?;
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    // 784111777 = Sun, 06 Nov 1994 08:49:37 GMT
    const T: u64 = 784_111_777;
    const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";
    const BEFORE: &[u8] = b"Sun, 06 Nov 1994 08:49:36 GMT";
    const AFTER: &[u8] = b"Sun, 06 Nov 1994 08:49:38 GMT";
    const ETAG: &[u8] = b"\"abc\"";

    fn v() -> Validators<'static> {
        Validators { etag: ETAG, last_modified: Some(T) }
    }

    fn proceed() -> Outcome {
        Outcome::Proceed { use_range: true }
    }

    fn get(c: Conditions<'_>) -> Outcome {
        evaluate(true, &c, &v())
    }

    fn put(c: Conditions<'_>) -> Outcome {
        evaluate(false, &c, &v())
    }

    #[test]
    fn no_conditions() {
        assert_eq!(get(Conditions::default()), proceed());
        assert_eq!(put(Conditions::default()), proceed());
    }

    #[test]
    fn step1_if_match() {
        let im = |s: &'static [u8]| Conditions { if_match: Some(s), ..Default::default() };
        assert_eq!(get(im(b"\"abc\"")), proceed());
        assert_eq!(get(im(b"*")), proceed());
        assert_eq!(get(im(b" * ")), proceed());
        assert_eq!(get(im(b"\"x\", \"abc\"")), proceed());
        assert_eq!(get(im(b"\"x\"")), Outcome::PreconditionFailed);
        // Strong comparison: a weak tag never matches.
        assert_eq!(get(im(b"W/\"abc\"")), Outcome::PreconditionFailed);
        assert_eq!(put(im(b"\"abc\"")), proceed());
        assert_eq!(put(im(b"\"x\"")), Outcome::PreconditionFailed);
        // Malformed lists never match.
        assert_eq!(get(im(b"abc")), Outcome::PreconditionFailed);
        assert_eq!(get(im(b"\"abc\" \"x\"")), Outcome::PreconditionFailed);
        assert_eq!(get(im(b"\"abc\", *")), Outcome::PreconditionFailed);
        assert_eq!(get(im(b"\"abc")), Outcome::PreconditionFailed);
        assert_eq!(get(im(b"")), Outcome::PreconditionFailed);
        assert_eq!(get(im(b",")), Outcome::PreconditionFailed);
    }

    #[test]
    fn step1_wins_over_if_unmodified_since() {
        // If-Match present: If-Unmodified-Since is not evaluated, even if it would fail.
        let c = Conditions { if_match: Some(b"\"abc\""), if_unmodified_since: Some(BEFORE), ..Default::default() };
        assert_eq!(get(c), proceed());
    }

    #[test]
    fn step2_if_unmodified_since() {
        let ius = |s: &'static [u8]| Conditions { if_unmodified_since: Some(s), ..Default::default() };
        assert_eq!(get(ius(DATE)), proceed());
        assert_eq!(get(ius(AFTER)), proceed());
        assert_eq!(get(ius(BEFORE)), Outcome::PreconditionFailed);
        assert_eq!(put(ius(BEFORE)), Outcome::PreconditionFailed);
        // Obsolete formats are valid HTTP-dates.
        assert_eq!(get(ius(b"Sunday, 06-Nov-94 08:49:36 GMT")), Outcome::PreconditionFailed);
        assert_eq!(get(ius(b"Sun Nov  6 08:49:36 1994")), Outcome::PreconditionFailed);
        // Invalid dates are ignored.
        assert_eq!(get(ius(b"yesterday")), proceed());
        assert_eq!(get(ius(b"")), proceed());
        let joined = b"Sun, 06 Nov 1994 08:49:36 GMT, Sun, 06 Nov 1994 08:49:36 GMT";
        assert_eq!(get(ius(joined)), proceed());
        // Unknown modification time: ignored.
        let c = ius(BEFORE);
        let unknown = Validators { etag: ETAG, last_modified: None };
        assert_eq!(evaluate(true, &c, &unknown), proceed());
    }

    #[test]
    fn step3_if_none_match() {
        let inm = |s: &'static [u8]| Conditions { if_none_match: Some(s), ..Default::default() };
        assert_eq!(get(inm(b"\"abc\"")), Outcome::NotModified);
        // Weak comparison: a weak tag matches.
        assert_eq!(get(inm(b"W/\"abc\"")), Outcome::NotModified);
        assert_eq!(get(inm(b"\"x\", W/\"abc\", \"y\"")), Outcome::NotModified);
        assert_eq!(get(inm(b"*")), Outcome::NotModified);
        assert_eq!(get(inm(b"\"x\"")), proceed());
        assert_eq!(get(inm(b"\"ABC\"")), proceed());
        // Not GET/HEAD: 412.
        assert_eq!(put(inm(b"\"abc\"")), Outcome::PreconditionFailed);
        assert_eq!(put(inm(b"*")), Outcome::PreconditionFailed);
        assert_eq!(put(inm(b"\"x\"")), proceed());
        // Malformed: no match.
        assert_eq!(get(inm(b"abc")), proceed());
        assert_eq!(get(inm(b"\"abc\" junk")), proceed());
        assert_eq!(get(inm(b"w/\"abc\"")), proceed());
    }

    #[test]
    fn step3_after_step2() {
        // If-Unmodified-Since fails before If-None-Match is looked at.
        let c = Conditions { if_unmodified_since: Some(BEFORE), if_none_match: Some(b"\"abc\""), ..Default::default() };
        assert_eq!(get(c), Outcome::PreconditionFailed);
        // If-Match passes, then If-None-Match matches.
        let c = Conditions { if_match: Some(b"\"abc\""), if_none_match: Some(b"\"abc\""), ..Default::default() };
        assert_eq!(get(c), Outcome::NotModified);
    }

    #[test]
    fn step4_if_modified_since() {
        let ims = |s: &'static [u8]| Conditions { if_modified_since: Some(s), ..Default::default() };
        assert_eq!(get(ims(DATE)), Outcome::NotModified);
        assert_eq!(get(ims(AFTER)), Outcome::NotModified);
        assert_eq!(get(ims(BEFORE)), proceed());
        assert_eq!(get(ims(b"not a date")), proceed());
        assert_eq!(get(ims(b"Sun, 06 Nov 1994 08:49:37 GMT, Sun, 06 Nov 1994 08:49:37 GMT")), proceed());
        // Only for GET/HEAD.
        assert_eq!(put(ims(DATE)), proceed());
        // Unknown modification time: ignored.
        let unknown = Validators { etag: ETAG, last_modified: None };
        assert_eq!(evaluate(true, &ims(DATE), &unknown), proceed());
    }

    #[test]
    fn if_none_match_wins_over_if_modified_since() {
        // The tag does not match: 200 even though the date says "not modified".
        let c = Conditions { if_none_match: Some(b"\"old\""), if_modified_since: Some(AFTER), ..Default::default() };
        assert_eq!(get(c), proceed());
        // The tag matches: 304 even though the date says "modified".
        let c = Conditions { if_none_match: Some(b"\"abc\""), if_modified_since: Some(BEFORE), ..Default::default() };
        assert_eq!(get(c), Outcome::NotModified);
        // A malformed If-None-Match still disables If-Modified-Since.
        let c = Conditions { if_none_match: Some(b"junk"), if_modified_since: Some(AFTER), ..Default::default() };
        assert_eq!(get(c), proceed());
    }

    #[test]
    fn step5_if_range() {
        let ir = |s: &'static [u8]| Conditions { if_range: Some(s), ..Default::default() };
        let no_range = Outcome::Proceed { use_range: false };
        assert_eq!(get(ir(b"\"abc\"")), proceed());
        assert_eq!(get(ir(b"\"abd\"")), no_range);
        // A weak tag never matches.
        assert_eq!(get(ir(b"W/\"abc\"")), no_range);
        // Dates must match exactly.
        assert_eq!(get(ir(DATE)), proceed());
        assert_eq!(get(ir(AFTER)), no_range);
        assert_eq!(get(ir(BEFORE)), no_range);
        // Junk and lists do not match.
        assert_eq!(get(ir(b"junk")), no_range);
        assert_eq!(get(ir(b"\"abc\", \"abc\"")), no_range);
        assert_eq!(get(ir(b"")), no_range);
        // Unknown modification time: a date cannot match.
        let unknown = Validators { etag: ETAG, last_modified: None };
        assert_eq!(evaluate(true, &ir(DATE), &unknown), no_range);
        assert_eq!(evaluate(true, &ir(b"\"abc\""), &unknown), proceed());
        // A 304 or 412 decided earlier is not affected by If-Range.
        let c = Conditions { if_none_match: Some(b"\"abc\""), if_range: Some(b"\"x\""), ..Default::default() };
        assert_eq!(get(c), Outcome::NotModified);
        let c = Conditions { if_match: Some(b"\"abc\""), if_range: Some(b"\"x\""), ..Default::default() };
        assert_eq!(get(c), no_range);
    }

    #[test]
    fn representation_without_tag() {
        let none = Validators { etag: b"", last_modified: Some(T) };
        let c = Conditions { if_match: Some(b"*"), ..Default::default() };
        assert_eq!(evaluate(true, &c, &none), proceed());
        let c = Conditions { if_match: Some(b"\"\""), ..Default::default() };
        assert_eq!(evaluate(true, &c, &none), Outcome::PreconditionFailed);
        let c = Conditions { if_none_match: Some(b"\"\""), ..Default::default() };
        assert_eq!(evaluate(true, &c, &none), proceed());
    }

    #[test]
    fn tags_with_commas_and_empty_elements() {
        let odd = Validators { etag: b"\"a,b\"", last_modified: None };
        let c = Conditions { if_none_match: Some(b" , \"x\",, \"a,b\" ,"), ..Default::default() };
        assert_eq!(evaluate(true, &c, &odd), Outcome::NotModified);
        let c = Conditions { if_match: Some(b"\"a\""), ..Default::default() };
        assert_eq!(evaluate(true, &c, &odd), Outcome::PreconditionFailed);
        // Empty opaque tags are valid syntax.
        let c = Conditions { if_none_match: Some(b"\"\", \"abc\""), ..Default::default() };
        assert_eq!(get(c), Outcome::NotModified);
    }

    #[test]
    fn garbage_never_panics() {
        let samples: [&[u8]; 10] =
            [b"W/", b"W/\"", b"\"", b"\"\"\"", b"\xff\xfe", b",,,", b"W/W/\"a\"", b"*,*", b"\"a\"\"b\"", b"\x00"];
        for s in samples {
            let c = Conditions {
                if_match: Some(s),
                if_none_match: Some(s),
                if_modified_since: Some(s),
                if_unmodified_since: Some(s),
                if_range: Some(s),
            };
            let _ = evaluate(true, &c, &v());
            let _ = evaluate(false, &c, &v());
        }
    }
}
