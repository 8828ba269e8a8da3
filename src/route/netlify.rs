//! Netlify-style `_redirects` files (one rule a line, `from to [status][!]`) and
//! `_headers` files (a path line, then indented `Name: value` lines).
//!
//! # `_redirects`
//!
//! The subset read:
//! - blank lines and lines starting with `#` are skipped; a `#` after the fields starts a
//!   comment too;
//! - `from` is a pattern (see [`super::pattern`]: literal segments, `:placeholders`, a final
//!   `*` splat); `to` is a path, or for redirects an `http(s)://` URL, using `:name` and
//!   `:splat`;
//! - the status is 301 (the default), 302, 303, 307 or 308 for a redirect, 200 for a
//!   rewrite (the client sees no redirect), or 404 for a rewrite answered with 404 (a custom
//!   not-found page for part of the site);
//! - a `!` after the status (`301!`, `200!`) *forces* the rule; without it, a rule applies
//!   only when the request's path does not name an existing file (Netlify's "shadowing").
//!
//! What a line may not do is handled in two ways:
//! - a malformed line (a bad pattern, a placeholder `to` does not have, a status that is not
//!   a number, a missing `to`) refuses the whole file with an error naming the file and the
//!   line: at start the server does not start, on a reload the old rules stay;
//! - a well-formed line using a Netlify feature that has no meaning for a static server here
//!   (query-parameter matches such as `id=:id`, conditions such as `Country=us` or
//!   `Role=admin`, a proxy: a 200 to an `http(s)://` URL, any other status such as 410) is
//!   skipped with a warning naming the file and the line, written to the error log.

//!
//! # `_headers`
//!
//! A line starting in the first column is a path pattern: literal segments, `:name` for
//! one segment and `*` for any run of segments (so `/css/*` is the URL pattern
//! `/css/**`); the indented lines under it are `Name: value` headers for the files whose
//! path matches. `Cache-Control` replaces the one `max_age` gives, as in `[[headers]]`;
//! the others are added. Like `[[headers]]`, the pattern is matched against the path of
//! the file served (`/about.html` for the clean URL `/about`). Blank lines and `#` lines
//! are skipped; anything else (a header before any path, a line without `:`, a bad name or
//! value, a `?` or `|` in a path) refuses the file with its line.

use super::pattern::{Pattern, Template};
use super::HeaderRule;
use super::{Kind, QueryMode, Rule};

/// Parses a `_redirects` file. `name` is used in messages. Returns the rules and the
/// warnings for skipped lines, or the error for the first malformed line.
pub fn parse(name: &str, text: &str) -> Result<(Vec<Rule>, Vec<String>), String> {
    let mut rules = Vec::new();
    let mut warnings = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = match line.find('#') {
            // A '#' starting a field begins a comment; one inside a field stays (a fragment
            // in `to` is refused below).
            Some(0) => continue,
            Some(k) if line.as_bytes()[k - 1].is_ascii_whitespace() => &line[..k],
            _ => line,
        };
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let skip = |why: &str| format!("{name}: line {n}: skipped: {why}");
        if fields.len() < 2 {
            return Err(format!("{name}: line {n}: expected \"from to [status]\""));
        }
        let (from, to) = (fields[0], fields[1]);
        if to.contains('=') && !to.starts_with('/') && !to.contains("://") {
            warnings.push(skip("query-parameter matches are not supported"));
            continue;
        }
        let mut status = 301;
        let mut force = false;
        let mut rest = &fields[2..];
        if let Some(first) = rest.first() {
            if first.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
                let (code, bang) = match first.strip_suffix('!') {
                    Some(c) => (c, true),
                    None => (*first, false),
                };
                status = code.parse().map_err(|_| format!("{name}: line {n}: \"{first}\" is not a status"))?;
                force = bang;
                rest = &rest[1..];
            }
        }
        if !rest.is_empty() {
            warnings.push(skip("conditions (such as Country= or Role=) are not supported"));
            continue;
        }
        let kind = match status {
            301 | 302 | 303 | 307 | 308 => Kind::Redirect(status),
            200 | 404 => Kind::Rewrite(status),
            _ => {
                warnings.push(skip(&format!("status {status} is not supported (301, 302, 303, 307, 308, 200, 404)")));
                continue;
            }
        };
        let lower = to.to_ascii_lowercase();
        if matches!(kind, Kind::Rewrite(_)) && (lower.starts_with("http://") || lower.starts_with("https://")) {
            warnings.push(skip("proxying to another server is not supported"));
            continue;
        }
        let pattern = Pattern::new(from).map_err(|e| format!("{name}: line {n}: {e}"))?;
        let rewrite = matches!(kind, Kind::Rewrite(_));
        if rewrite && to.contains('?') {
            return Err(format!("{name}: line {n}: a rewrite's target cannot have a query"));
        }
        let template = Template::new(to, &pattern, !rewrite).map_err(|e| format!("{name}: line {n}: {e}"))?;
        rules.push(Rule {
            from: pattern,
            to: template,
            kind,
            force,
            query: QueryMode::Keep,
            origin: format!("{name}: line {n}"),
        });
    }
    Ok((rules, warnings))
}

/// Parses a `_headers` file into header rules, in file order.
pub fn parse_headers(name: &str, text: &str) -> Result<Vec<HeaderRule>, String> {
    let mut rules: Vec<HeaderRule> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if !line.starts_with([' ', '\t']) {
            if !trimmed.starts_with('/') || trimmed.contains(['?', '|', ' ', '\t']) {
                return Err(format!("{name}: line {n}: \"{trimmed}\" is not a path pattern such as /css/*"));
            }
            let glob: Vec<String> = trimmed
                .split('/')
                .map(|seg| match seg {
                    "*" => "**".to_string(),
                    s if s.starts_with(':') => "*".to_string(),
                    s => s.to_string(),
                })
                .collect();
            let pattern = crate::glob::Pattern::new(&glob.join("/"));
            rules.push(HeaderRule { pattern: Some(pattern), mime: None, cache_control: None, headers: Vec::new() });
            continue;
        }
        let Some(rule) = rules.last_mut() else {
            return Err(format!("{name}: line {n}: a header before any path"));
        };
        let Some((field, value)) = trimmed.split_once(':') else {
            return Err(format!("{name}: line {n}: expected \"Name: value\""));
        };
        let (field, value) = (field.trim(), value.trim());
        let token =
            !field.is_empty() && field.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token || value.is_empty() || !crate::http::is_field_value(value.as_bytes()) {
            return Err(format!("{name}: line {n}: \"{trimmed}\" is not a valid header"));
        }
        if field.eq_ignore_ascii_case("cache-control") {
            rule.cache_control = Some(value.to_string());
        } else {
            rule.headers.push((field.to_string(), value.to_string()));
        }
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subset() {
        let text = "# comment\n\n/old /new\n/a/:x /b/:x 302\n/app/* /index.html 200\n/f /g 301!\n\
                    /store id=:id /blog/:id 301\n/uk/* /uk.html 200 Country=gb\n/api/* https://api.example/:splat 200\n\
                    /gone /x 410\n/x /y # trailing comment\n";
        let (rules, warnings) = parse("_redirects", text).unwrap();
        let kinds: Vec<(Kind, bool)> = rules.iter().map(|r| (r.kind, r.force)).collect();
        assert_eq!(
            kinds,
            vec![
                (Kind::Redirect(301), false),
                (Kind::Redirect(302), false),
                (Kind::Rewrite(200), false),
                (Kind::Redirect(301), true),
                (Kind::Redirect(301), false),
            ]
        );
        assert_eq!(rules[2].origin, "_redirects: line 5");
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        assert!(warnings[0].starts_with("_redirects: line 7: skipped"), "{warnings:?}");
        assert!(warnings[3].contains("line 10") && warnings[3].contains("410"), "{warnings:?}");
    }

    #[test]
    fn malformed_lines_name_the_line() {
        for (text, line) in [
            ("/ok /fine\n/lonely\n", 2),
            ("\n\n/a/:x /b/:y\n", 3),
            ("/a /b 30x\n", 1),
            ("/a/*/b /c\n", 1),
            ("/a //evil.example\n", 1),
            ("/a /b?x=1 200\n", 1),
            ("a /b\n", 1),
        ] {
            let e = parse("_redirects", text).unwrap_err();
            assert!(e.starts_with(&format!("_redirects: line {line}:")), "{text:?}: {e}");
        }
    }

    #[test]
    fn headers_files() {
        let text = "# comment\n/css/*\n  Cache-Control: public, max-age=31536000, immutable\n  X-A: 1\n\n/posts/:slug/index.html\n\tX-B: 2\n";
        let rules = parse_headers("_headers", text).unwrap();
        assert_eq!(rules.len(), 2);
        assert!(rules[0].pattern.as_ref().unwrap().matches("/css/a/site.css"));
        assert!(!rules[0].pattern.as_ref().unwrap().matches("/js/x.js"));
        assert_eq!(rules[0].cache_control.as_deref(), Some("public, max-age=31536000, immutable"));
        assert_eq!(rules[0].headers, vec![("X-A".to_string(), "1".to_string())]);
        assert!(rules[1].pattern.as_ref().unwrap().matches("/posts/hi/index.html"));
        assert!(!rules[1].pattern.as_ref().unwrap().matches("/posts/a/b/index.html"));
        for (text, line) in [
            ("  X-A: 1\n", 1),
            ("/a\n  no colon\n", 2),
            ("/a\n  Bad Name: x\n", 2),
            ("/a\n\n  X: \n", 3),
            ("/a?b\n", 1),
            ("css/*\n", 1),
        ] {
            let e = parse_headers("_headers", text).unwrap_err();
            assert!(e.starts_with(&format!("_headers: line {line}:")), "{text:?}: {e}");
        }
    }
}
