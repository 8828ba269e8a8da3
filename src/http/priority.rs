//! The Extensible Prioritization Scheme for HTTP (RFC 9218): the `priority` request field
//! and the PRIORITY_UPDATE frame carry an urgency (`u`, 0 the most urgent to 7, default 3)
//! and whether the response is useful in pieces (`i`, incremental, default false), as a
//! Structured Fields dictionary (RFC 8941 §3.2).
//!
//! Protocol-neutral: HTTP/2 and HTTP/3 carry the same field and the same parameters (only
//! the PRIORITY_UPDATE frame's encoding differs, and stays with each protocol). How a
//! connection uses them (`conn/h2.rs`): among the streams that can send, the lowest
//! urgency goes first; within one urgency, non-incremental streams one at a time in stream
//! order, then incremental ones taking turns. A stream that carried no signal is scheduled
//! as urgency 3 *incremental*, taking turns with the others as before this scheme (the
//! RFC's default is non-incremental, which would send a page's images one after the other,
//! a large one holding up all behind it: RFC 9218 §10 leaves the scheduling to the server).

/// A stream's priority parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Priority {
    pub urgency: u8,
    pub incremental: bool,
}

impl Default for Priority {
    /// RFC 9218 §4.1, §4.2: `u=3`, not incremental.
    fn default() -> Priority {
        Priority { urgency: 3, incremental: false }
    }
}

impl Priority {
    /// Applies one field value (a `priority` field line, or a PRIORITY_UPDATE's value) to
    /// `self`: members override in order, as repeated field lines combine into one list.
    /// What does not parse, unknown keys, parameters and out-of-range values are ignored
    /// (RFC 9218 §4: a bad value is as if absent).
    pub fn apply(&mut self, value: &[u8]) {
        for member in value.split(|&b| b == b',') {
            // A member's parameters (`;...`) mean nothing for these keys.
            let member = member.split(|&b| b == b';').next().unwrap_or(&[]).trim_ascii();
            let (key, v) = match member.iter().position(|&b| b == b'=') {
                Some(i) => (&member[..i], Some(&member[i + 1..])),
                None => (member, None),
            };
            match (key, v) {
                (b"u", Some(&[d])) if (b'0'..=b'7').contains(&d) => self.urgency = d - b'0',
                (b"i", None | Some(b"?1")) => self.incremental = true,
                (b"i", Some(b"?0")) => self.incremental = false,
                _ => {}
            }
        }
    }

    /// The parameters one field value gives, from the defaults (a PRIORITY_UPDATE
    /// replaces the stream's priority: what it omits is the default).
    pub fn parse(value: &[u8]) -> Priority {
        let mut p = Priority::default();
        p.apply(value);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(u: u8, i: bool) -> Priority {
        Priority { urgency: u, incremental: i }
    }

    #[test]
    fn parses_urgency_and_incremental() {
        assert_eq!(Priority::parse(b""), p(3, false));
        assert_eq!(Priority::parse(b"u=0"), p(0, false));
        assert_eq!(Priority::parse(b"u=7, i"), p(7, true));
        assert_eq!(Priority::parse(b"i, u=5"), p(5, true));
        assert_eq!(Priority::parse(b"i=?1"), p(3, true));
        assert_eq!(Priority::parse(b"u=1,i=?0"), p(1, false));
        assert_eq!(Priority::parse(b" u=2 ;a=b , i;x "), p(2, true));
        // A later member overrides an earlier one.
        assert_eq!(Priority::parse(b"u=1, u=6"), p(6, false));
    }

    #[test]
    fn ignores_what_is_invalid_or_unknown() {
        assert_eq!(Priority::parse(b"u=8"), p(3, false));
        assert_eq!(Priority::parse(b"u=-1"), p(3, false));
        assert_eq!(Priority::parse(b"u=10"), p(3, false));
        assert_eq!(Priority::parse(b"u"), p(3, false));
        assert_eq!(Priority::parse(b"u=\"1\""), p(3, false));
        assert_eq!(Priority::parse(b"i=1"), p(3, false));
        assert_eq!(Priority::parse(b"x=1, y, u=4"), p(4, false));
        assert_eq!(Priority::parse(b"U=1"), p(3, false));
    }

    #[test]
    fn repeated_field_lines_combine() {
        let mut q = Priority::default();
        q.apply(b"u=5");
        q.apply(b"i");
        assert_eq!(q, p(5, true));
    }
}
