//! thttpd-style URL patterns, shared by throttles, header rules and referrer checks.
//!
//! `*` matches any run of characters except `/`, `**` matches any run including `/`, `?`
//! matches one character other than `/`, and `|` separates alternatives. A leading `/` on
//! the pattern or the path is ignored, as thttpd does. Everything else matches itself.
//! Matching is by backtracking over bytes with a memo, so it is linear in
//! `pattern × path` even for adversarial patterns: each (token, offset) state is visited once.

/// A compiled pattern: a list of alternatives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    source: String,
    alternatives: Vec<Vec<Token>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Byte(u8),
    /// `?`
    One,
    /// `*`
    Star,
    /// `**`
    DoubleStar,
}

impl Pattern {
    /// Compiles a pattern. Empty alternatives (`a||b`) are dropped; a pattern with none
    /// left matches nothing.
    pub fn new(source: &str) -> Pattern {
        let alternatives = source
            .split('|')
            .filter(|a| !a.is_empty())
            .map(|alt| {
                let alt = alt.strip_prefix('/').unwrap_or(alt).as_bytes();
                let mut toks = Vec::with_capacity(alt.len());
                let mut i = 0;
                while i < alt.len() {
                    match alt[i] {
                        b'*' if alt.get(i + 1) == Some(&b'*') => {
                            toks.push(Token::DoubleStar);
                            i += 2;
                            continue;
                        }
                        b'*' => toks.push(Token::Star),
                        b'?' => toks.push(Token::One),
                        b => toks.push(Token::Byte(b)),
                    }
                    i += 1;
                }
                toks
            })
            .collect();
        Pattern { source: source.to_string(), alternatives }
    }

    /// The text the pattern was compiled from.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// True if any alternative matches the whole of `path`.
    pub fn matches(&self, path: &str) -> bool {
        let p = path.strip_prefix('/').unwrap_or(path).as_bytes();
        self.alternatives.iter().any(|alt| matches_tokens(alt, p))
    }
}

/// The literal bytes of `toks` if it holds no wildcard.
fn literal(toks: &[Token]) -> Option<impl Iterator<Item = u8> + '_> {
    toks.iter().all(|t| matches!(t, Token::Byte(_))).then(|| {
        toks.iter().map(|t| match t {
            Token::Byte(b) => *b,
            _ => 0,
        })
    })
}

fn matches_tokens(toks: &[Token], s: &[u8]) -> bool {
    // The shapes throttle files and header rules are made of, without allocating:
    // "literal", "**literal" (a suffix) and "literal**" (a prefix).
    if let Some(lit) = literal(toks) {
        return lit.eq(s.iter().copied());
    }
    match toks {
        [Token::DoubleStar, rest @ ..] if literal(rest).is_some() => {
            return s.len() >= rest.len()
                && literal(rest).is_some_and(|l| l.eq(s[s.len() - rest.len()..].iter().copied()));
        }
        [rest @ .., Token::DoubleStar] if literal(rest).is_some() => {
            return s.len() >= rest.len() && literal(rest).is_some_and(|l| l.eq(s[..rest.len()].iter().copied()));
        }
        _ => {}
    }
    // memo[(ti, si)] = already known not to match.
    let width = s.len() + 1;
    let mut dead = vec![false; (toks.len() + 1) * width];
    let mut stack = vec![(0usize, 0usize)];
    while let Some((ti, si)) = stack.pop() {
        if dead[ti * width + si] {
            continue;
        }
        dead[ti * width + si] = true;
        if ti == toks.len() {
            if si == s.len() {
                return true;
            }
            continue;
        }
        match toks[ti] {
            Token::Byte(b) => {
                if s.get(si) == Some(&b) {
                    stack.push((ti + 1, si + 1));
                }
            }
            Token::One => {
                if s.get(si).is_some_and(|&c| c != b'/') {
                    stack.push((ti + 1, si + 1));
                }
            }
            Token::Star | Token::DoubleStar => {
                // Either the star ends here, or it takes one more character.
                stack.push((ti + 1, si));
                let slash_ok = toks[ti] == Token::DoubleStar;
                if s.get(si).is_some_and(|&c| slash_ok || c != b'/') {
                    stack.push((ti, si + 1));
                }
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        Pattern::new(p).matches(s)
    }

    #[test]
    fn thttpd_examples() {
        assert!(m("**", "/anything/at/all.jpg"));
        assert!(m("**.jpg|**.png", "/a/b/c.png"));
        assert!(m("**.jpg|**.png", "/c.jpg"));
        assert!(!m("**.jpg|**.png", "/c.gif"));
        assert!(m("/videos/**", "/videos/x/y.mp4"));
        assert!(!m("/videos/**", "/other/videos/y.mp4"));
        assert!(m("*.html", "/index.html"));
        assert!(!m("*.html", "/dir/index.html"));
        assert!(m("dir/?.txt", "/dir/a.txt"));
        assert!(!m("dir/?.txt", "/dir/ab.txt"));
        assert!(!m("a?b", "a/b"));
        assert!(!m("", ""));
        assert!(m("a||b", "b"));
    }

    #[test]
    fn fast_shapes_agree_with_the_general_matcher() {
        for (p, yes, no) in [
            ("/exact.txt", "/exact.txt", "/exact.txt2"),
            ("**.jpg", "/a/b.jpg", "/a/b.jpeg"),
            ("/videos/**", "/videos/", "/video/x"),
            ("**", "/", "/x"),
        ] {
            assert!(m(p, yes), "{p} {yes}");
            if p != "**" {
                assert!(!m(p, no), "{p} {no}");
            }
        }
        assert!(m("**", "/x"));
        assert!(!m("**.jpg", "jp"));
    }

    #[test]
    fn adversarial_is_fast() {
        let p = Pattern::new(&"*a".repeat(30));
        let s = "a".repeat(5000) + "b";
        assert!(!p.matches(&s));
        let p = Pattern::new(&"**a".repeat(30));
        assert!(!p.matches(&s));
    }
}
