//! thttpd-style throttles: URL patterns → byte rates, fair share, and a per-connection
//! token bucket.
//!
//! Three parts, all pure (the event loop passes `now` and drives the timers):
//!
//! - [`parse_throttles`] reads thttpd's throttle file: `pattern rate` or `pattern min-max`,
//!   rates in bytes per second as plain decimal integers (no `K`/`M` suffix: thttpd has none,
//!   and a thttpd file must mean the same thing here). `#` starts a comment, blank lines are
//!   skipped; a line that does not parse, or whose maximum is 0 or below its minimum, is
//!   returned as bad (the caller logs it) and skipped. As in thttpd, a leading `/` on the
//!   pattern and after each `|` is dropped.
//! - [`Throttles`] is thttpd's accounting. Each rule keeps a rolling rate, updated every
//!   [`THROTTLE_TIME`] by [`Throttles::update`] as `rate = (2·rate + bytes/elapsed) / 3`, and
//!   the number of transfers now sending under it. A transfer matches at most
//!   [`MAX_THROTTLES_PER_CONN`] rules (thttpd's 10) and may send at most `max / sending` of
//!   each, the smallest such share winning ([`Throttles::allowance`]). A new request matching
//!   a rule is refused (503) when the rule's rate is above twice its maximum (thttpd's test),
//!   or when admitting it would cut every transfer's share below the minimum:
//!   `max / (sending + 1) < min`.
//!
//!   **The minimum, and where this differs from thttpd.** thttpd's manual says what a minimum
//!   is for: when so many fetch at once that each transfer would be too slow to be usable,
//!   "past a certain point you should not even bother" and answer "try again later". Its code
//!   (`check_throttles`) instead refuses while the rule's *rolling rate* is below the
//!   minimum. That rate starts at 0 and moves only every 2 s, so a second download 0.2 s
//!   after the first is refused (and an idle server refuses the first), and one client
//!   reading 256 B/s keeps the rate under the minimum so everybody else is refused — the
//!   opposite of the purpose. Here the minimum is a floor on the share: `100000-200000`
//!   admits two transfers at once (100 kB/s each) and refuses a third, whatever the rates.
//!   The rolling rate still decides the "twice the maximum" refusal.
//! - [`floor_rate`]: a paced transfer is not exempt from the loop's `min_send_rate` check
//!   (a client reading slowly would otherwise pin a throttle slot for as long as it likes);
//!   it must average at least half of what it is allowed, and never more than `min_send_rate`.
//! - [`RateLimiter`] is a token bucket that paces one connection at a byte rate (the share
//!   above, or an nginx-like `limit_rate` after `limit_rate_after` bytes), and tells the loop
//!   when to wake up next. [`parse_rate`] reads the TOML form's `"200KiB/s"`.
//!
//! How the loop uses them, for a request of `path`:
//!
//! 1. `throttles.admit(path)`: `Err` → 503; `Ok(adm)` → keep `adm` with the transfer and
//!    start `RateLimiter::new(throttles.allowance(&adm), 0, now)` (or with `limit_rate`).
//! 2. Before each write: `n = limiter.allowed(now, budget)`; write at most `n` body bytes;
//!    then `limiter.consume(written)` and `throttles.sent(&adm, written)`. When `n` is 0 (or
//!    too small to be worth a syscall), arm a timer at `limiter.next_at(now, chunk)` instead
//!    of waiting for writability.
//! 3. Every [`THROTTLE_TIME`]: `throttles.update(elapsed)`, then for each throttled transfer
//!    `limiter.set_rate(throttles.allowance(&adm))` (thttpd redistributes only then).
//! 4. When the transfer ends or the connection closes: `throttles.finish(&adm)`, once.
//!
//! A reload that changes the rules makes a new `Throttles`; an admission remembers which
//! one registered it ([`Throttles::owns`]), so transfers still running under the old rules
//! are neither counted nor paced by the new ones (they keep their last rate), and their
//! `finish` cannot take a count from a transfer of the new rules. Unchanged rules keep their
//! state across a reload.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::glob::Pattern;

/// How often the loop should call [`Throttles::update`] (thttpd's `THROTTLE_TIME`).
pub const THROTTLE_TIME: Duration = Duration::from_secs(2);

/// At most this many rules apply to one transfer (thttpd's `MAXTHROTTLENUMS`); further
/// matching rules are ignored for that transfer.
pub const MAX_THROTTLES_PER_CONN: usize = 10;

/// One line of a throttle file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThrottleRule {
    /// Matched against the file path (with vhosts: `host/path`).
    pub pattern: Pattern,
    /// Bytes/s; below this rolling rate new requests are refused. 0 if none.
    pub min: u64,
    /// Bytes/s shared by the transfers under this rule; always > 0.
    pub max: u64,
}

/// Parses a throttle file. Returns the rules in file order and the lines that did not parse
/// (1-based line number and the line's text) for the caller to log.
pub fn parse_throttles(text: &str) -> (Vec<ThrottleRule>, Vec<(usize, String)>) {
    let mut rules = Vec::new();
    let mut bad = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        match parse_rule(line) {
            Some(rule) => rules.push(rule),
            None => bad.push((n + 1, raw.to_string())),
        }
    }
    (rules, bad)
}

fn parse_rule(line: &str) -> Option<ThrottleRule> {
    let mut words = line.split([' ', '\t']).filter(|w| !w.is_empty());
    let pattern = words.next()?;
    let rate = words.next()?;
    if words.next().is_some() {
        return None;
    }
    let (min, max) = match rate.split_once('-') {
        Some((min, max)) => (parse_integer(min)?, parse_integer(max)?),
        None => (0, parse_integer(rate)?),
    };
    if max == 0 || min > max {
        return None;
    }
    // thttpd drops the leading slash of each alternative ("/a|/b" → "a|b").
    let pattern = pattern.split('|').map(|alt| alt.strip_prefix('/').unwrap_or(alt)).collect::<Vec<_>>().join("|");
    Some(ThrottleRule { pattern: Pattern::new(&pattern), min, max })
}

fn parse_integer(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The runtime state of one rule.
#[derive(Debug, Clone)]
struct RuleState {
    rule: ThrottleRule,
    /// Transfers registered under the rule and not yet finished.
    sending: u64,
    /// Bytes sent under the rule since the last `update`.
    bytes_since: u64,
    /// Rolling average, bytes/s.
    rate: u64,
}

/// A snapshot of one rule, for statistics (USR2) and the loop's warnings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThrottleStatus {
    /// The rule's pattern as written.
    pub pattern: String,
    /// The rule's minimum, bytes/s (0 if none).
    pub min: u64,
    /// The rule's maximum, bytes/s.
    pub max: u64,
    /// The rolling rate, bytes/s.
    pub rate: u64,
    /// Transfers now sending under the rule.
    pub sending: u64,
}

/// thttpd's throttle accounting, driven by the event loop: no sleeping, no threads.
#[derive(Debug, Clone, Default)]
pub struct Throttles {
    rules: Vec<RuleState>,
    /// Which `Throttles` this is (unique in the process), stamped on its admissions.
    generation: u64,
}

/// The source of [`Throttles::generation`].
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

/// The rules a transfer was registered with by [`Throttles::admit`] (at most
/// [`MAX_THROTTLES_PER_CONN`]). Pass it back to `allowance`, `sent` and, exactly once,
/// `finish`. Empty means unthrottled.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Admission {
    idx: [u16; MAX_THROTTLES_PER_CONN],
    len: u8,
    generation: u64,
}

impl Admission {
    /// True if no rule applies: the transfer is unthrottled.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The indexes (into the rule list) of the rules that apply.
    pub fn rules(&self) -> impl Iterator<Item = usize> + '_ {
        self.idx[..usize::from(self.len)].iter().map(|&i| usize::from(i))
    }

    fn push(&mut self, i: usize) -> bool {
        let Ok(i) = u16::try_from(i) else { return false };
        if usize::from(self.len) >= MAX_THROTTLES_PER_CONN {
            return false;
        }
        self.idx[usize::from(self.len)] = i;
        self.len += 1;
        true
    }
}

impl Throttles {
    /// Accounting for `rules`, all idle with a rate of 0. Rules past the 65 536th are ignored.
    pub fn new(rules: Vec<ThrottleRule>) -> Throttles {
        let rules = rules
            .into_iter()
            .take(usize::from(u16::MAX) + 1)
            .map(|rule| RuleState { rule, sending: 0, bytes_since: 0, rate: 0 })
            .collect();
        Throttles { rules, generation: GENERATIONS.fetch_add(1, Ordering::Relaxed) }
    }

    /// The accounting for a reloaded configuration: `self` as it is if the rules are the
    /// same (counts and rates carry on), else fresh accounting for `rules`.
    pub fn reload(self, rules: &[ThrottleRule]) -> Throttles {
        if self.rules.iter().map(|st| &st.rule).eq(rules.iter()) {
            self
        } else {
            Throttles::new(rules.to_vec())
        }
    }

    /// True if `adm` was registered by this accounting (not by the one before a reload).
    /// Only then do `allowance`, `sent` and `finish` apply to it.
    pub fn owns(&self, adm: &Admission) -> bool {
        adm.generation == self.generation
    }

    /// True if there are no rules (every transfer is unthrottled).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Admits a new request for `path` (with vhosts: `"host/path"`). `Err(())` means 503: a
    /// matching rule's rolling rate is above twice its maximum, or one more transfer would get
    /// less than its minimum (`max / (sending + 1) < min`); nothing is registered then. `Ok(adm)` registers the transfer with each matching rule (the first
    /// [`MAX_THROTTLES_PER_CONN`]); `adm` is empty when no rule matches.
    #[allow(clippy::result_unit_err)]
    pub fn admit(&mut self, path: &str) -> Result<Admission, ()> {
        let mut adm = Admission { generation: self.generation, ..Admission::default() };
        for (i, st) in self.rules.iter().enumerate() {
            if usize::from(adm.len) >= MAX_THROTTLES_PER_CONN {
                break;
            }
            if st.rule.pattern.matches(path) {
                let share = st.rule.max / st.sending.saturating_add(1);
                if st.rate > st.rule.max.saturating_mul(2) || share < st.rule.min {
                    return Err(());
                }
                adm.push(i);
            }
        }
        for i in adm.rules() {
            if let Some(st) = self.rules.get_mut(i) {
                st.sending += 1;
            }
        }
        Ok(adm)
    }

    /// Bytes/s this transfer may use now: the minimum over its rules of
    /// `max / transfers sending under the rule`; `u64::MAX` when unthrottled. Meaningless for
    /// an admission this accounting does not [own](Self::owns).
    pub fn allowance(&self, adm: &Admission) -> u64 {
        adm.rules()
            .filter_map(|i| self.rules.get(i))
            .map(|st| st.rule.max / st.sending.max(1))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Accounts `bytes` sent by a transfer to each of its rules.
    pub fn sent(&mut self, adm: &Admission, bytes: u64) {
        if !self.owns(adm) {
            return;
        }
        for i in adm.rules() {
            if let Some(st) = self.rules.get_mut(i) {
                st.bytes_since = st.bytes_since.saturating_add(bytes);
            }
        }
    }

    /// The transfer ended (or its connection closed): unregisters it. Call exactly once per
    /// admission (a second call would undercount other transfers; counts never go below 0).
    pub fn finish(&mut self, adm: &Admission) {
        if !self.owns(adm) {
            return;
        }
        for i in adm.rules() {
            if let Some(st) = self.rules.get_mut(i) {
                st.sending = st.sending.saturating_sub(1);
            }
        }
    }

    /// Called by the loop every [`THROTTLE_TIME`] or so with the time since the previous call:
    /// folds the bytes sent since then into each rule's rolling rate,
    /// `rate = (2·rate + bytes/elapsed) / 3`, and resets the counters. A zero `elapsed` does
    /// nothing (the bytes stay counted for the next call). Afterwards the loop re-reads
    /// [`allowance`](Self::allowance) for its transfers, as thttpd redistributes then.
    pub fn update(&mut self, elapsed: Duration) {
        let micros = elapsed.as_micros();
        if micros == 0 {
            return;
        }
        for st in &mut self.rules {
            let recent = u128::from(st.bytes_since) * 1_000_000 / micros;
            let rate = (2 * u128::from(st.rate) + recent) / 3;
            st.rate = u64::try_from(rate).unwrap_or(u64::MAX);
            st.bytes_since = 0;
        }
    }

    /// The state of every rule, in file order.
    pub fn status(&self) -> impl Iterator<Item = ThrottleStatus> + '_ {
        self.rules.iter().map(|st| ThrottleStatus {
            pattern: st.rule.pattern.as_str().to_string(),
            min: st.rule.min,
            max: st.rule.max,
            rate: st.rate,
            sending: st.sending,
        })
    }
}

/// The average rate (bytes/s) below which a transfer paced at `allowed` bytes/s is too slow
/// to keep (checked once it is older than `send_timeout`): half of `allowed`, but never more
/// than `min_send_rate`, the floor for unpaced transfers (a client on a slow link is not held
/// to more because its file happens to be throttled). 0 when `min_send_rate` is 0 (the check
/// is off) or `allowed` is unlimited (`u64::MAX`: then `min_send_rate` itself).
pub fn floor_rate(min_send_rate: u64, allowed: u64) -> u64 {
    min_send_rate.min(allowed / 2)
}

const NANOS: u128 = 1_000_000_000;

/// A per-connection token bucket for a byte rate: how many bytes may be sent now, and when to
/// try again. Also serves nginx-like `limit_rate` / `limit_rate_after`: the first `after`
/// bytes go out unpaced.
///
/// The bucket holds at most a quarter second of the rate (thttpd sends at most a quarter
/// second's worth per write) and starts full, so a transfer starts at once and averages the
/// rate over any longer span. Tokens are kept in byte·nanoseconds, so there is no rounding
/// drift however often the loop asks. A rate of 0 or `u64::MAX` means unlimited.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    rate: u64,
    /// Capacity, bytes.
    burst: u64,
    /// Tokens, in byte·ns (bytes × 10⁹).
    tokens: u128,
    last: Instant,
    /// Bytes that go out unpaced before limiting starts.
    after: u64,
    /// Bytes consumed so far (for `after`).
    sent: u64,
}

impl RateLimiter {
    /// A limiter at `rate` bytes/s (0 or `u64::MAX` = unlimited) whose first `after` bytes
    /// are not limited.
    pub fn new(rate: u64, after: u64, now: Instant) -> RateLimiter {
        let burst = burst_for(rate);
        RateLimiter { rate, burst, tokens: u128::from(burst) * NANOS, last: now, after, sent: 0 }
    }

    /// Changes the rate (e.g. when the throttle share changes). Tokens above the new burst
    /// are dropped.
    pub fn set_rate(&mut self, rate: u64) {
        self.rate = rate;
        self.burst = burst_for(rate);
        self.tokens = self.tokens.min(u128::from(self.burst) * NANOS);
    }

    /// The current rate, bytes/s (0 or `u64::MAX` = unlimited).
    pub fn rate(&self) -> u64 {
        self.rate
    }

    fn unlimited(&self) -> bool {
        self.rate == 0 || self.rate == u64::MAX
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_nanos();
        self.last = self.last.max(now);
        let cap = u128::from(self.burst) * NANOS;
        self.tokens = self.tokens.saturating_add(dt.saturating_mul(u128::from(self.rate))).min(cap);
    }

    fn free_bytes(&self) -> u64 {
        self.after.saturating_sub(self.sent)
    }

    /// How many bytes may go out now (after refilling up to `now`), at most `want`.
    pub fn allowed(&mut self, now: Instant, want: u64) -> u64 {
        if self.unlimited() {
            return want;
        }
        self.refill(now);
        let tokens = u64::try_from(self.tokens / NANOS).unwrap_or(u64::MAX);
        self.free_bytes().saturating_add(tokens).min(want)
    }

    /// Records `n` bytes sent: the unpaced allowance is used first, then tokens.
    pub fn consume(&mut self, n: u64) {
        let free = self.free_bytes().min(n);
        self.sent = self.sent.saturating_add(n);
        if self.unlimited() {
            return;
        }
        let paced = u128::from(n - free);
        self.tokens = self.tokens.saturating_sub(paced * NANOS);
    }

    /// When at least `min_chunk` bytes (capped at the burst, so the answer always comes) will
    /// be allowed, for the loop's timer; `None` if that many are allowed now.
    pub fn next_at(&self, now: Instant, min_chunk: u64) -> Option<Instant> {
        if self.unlimited() {
            return None;
        }
        let need = min_chunk.clamp(1, self.burst.max(1));
        let free = self.free_bytes();
        if free >= need {
            return None;
        }
        let dt = now.saturating_duration_since(self.last).as_nanos();
        let cap = u128::from(self.burst) * NANOS;
        let tokens = self.tokens.saturating_add(dt.saturating_mul(u128::from(self.rate))).min(cap);
        let need_tokens = u128::from(need - free) * NANOS;
        if tokens >= need_tokens {
            return None;
        }
        let wait_ns = (need_tokens - tokens).div_ceil(u128::from(self.rate));
        let wait = Duration::from_nanos(u64::try_from(wait_ns).unwrap_or(u64::MAX));
        Some(now.checked_add(wait).unwrap_or(now + Duration::from_secs(3600)))
    }
}

/// A quarter second of `rate`, at least one byte.
fn burst_for(rate: u64) -> u64 {
    (rate / 4).max(1)
}

/// Parses a rate for the TOML form: a number (integer or decimal) with an optional unit and an
/// optional `/s`: `"50000"`, `"200KiB/s"`, `"1.5MB/s"`, `"10 k"`. Units are case-insensitive;
/// `K`/`KB`, `M`/`MB`, `G`/`GB` are decimal (1000ⁿ), `Ki`/`KiB`, `Mi`/`MiB`, `Gi`/`GiB` binary
/// (1024ⁿ), `B` or nothing is bytes. Fractions are truncated to whole bytes. `None` for
/// anything else or on overflow. `"0"` gives `Some(0)` (the caller decides what 0 means).
pub fn parse_rate(s: &str) -> Option<u64> {
    let s = s.trim();
    let s = s.strip_suffix("/s").or_else(|| s.strip_suffix("/S")).unwrap_or(s).trim_end();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let multiplier: u128 = match unit.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "ki" | "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mi" | "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gi" | "gib" => 1 << 30,
        _ => return None,
    };
    let (int, frac) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int.is_empty() && frac.is_empty() || frac.contains('.') || int.len() > 20 || frac.len() > 18 {
        return None;
    }
    let int: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let frac_value: u128 = if frac.is_empty() { 0 } else { frac.parse().ok()? };
    let scale = 10u128.pow(u32::try_from(frac.len()).ok()?);
    let total = int.checked_mul(multiplier)?.checked_add(frac_value.checked_mul(multiplier)? / scale)?;
    u64::try_from(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "\
# site-wide: at most 100 kB/s in total, and refuse new transfers while below 2 kB/s
**                 2000-100000
**.jpg|**.png      50000
/videos/**         20000
";

    fn rule(p: &str, min: u64, max: u64) -> ThrottleRule {
        ThrottleRule { pattern: Pattern::new(p), min, max }
    }

    #[test]
    fn parses_the_thttpd_example() {
        let (rules, bad) = parse_throttles(EXAMPLE);
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(rules, vec![rule("**", 2000, 100000), rule("**.jpg|**.png", 0, 50000), rule("videos/**", 0, 20000)]);
        assert!(rules[2].pattern.matches("/videos/a.mp4"));
    }

    #[test]
    fn leading_slashes_of_alternatives_are_dropped() {
        let (rules, _) = parse_throttles("/a/**|/b/** 100\n");
        assert_eq!(rules[0].pattern.as_str(), "a/**|b/**");
        assert!(rules[0].pattern.matches("b/x"));
    }

    #[test]
    fn bad_lines_are_reported_and_skipped() {
        let text = "** 100\nnorate\n** 10x\n** 5-\n** -5\n** 0\n** 9-3\n** 1 2\n\t\n# only a comment\n*.gif 7 # ok\n";
        let (rules, bad) = parse_throttles(text);
        assert_eq!(rules, vec![rule("**", 0, 100), rule("*.gif", 0, 7)]);
        let lines: Vec<usize> = bad.iter().map(|(n, _)| *n).collect();
        assert_eq!(lines, vec![2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(bad[0].1, "norate");
        let (_, bad) = parse_throttles("** 99999999999999999999999\n");
        assert_eq!(bad.len(), 1);
    }

    #[test]
    fn crlf_and_tabs() {
        let (rules, bad) = parse_throttles("**.mp4\t\t300-4000\r\n");
        assert!(bad.is_empty());
        assert_eq!(rules, vec![rule("**.mp4", 300, 4000)]);
    }

    #[test]
    fn unmatched_paths_are_unthrottled() {
        let mut t = Throttles::new(vec![rule("**.jpg", 0, 1000)]);
        let adm = t.admit("/index.html").unwrap();
        assert!(adm.is_empty());
        assert_eq!(t.allowance(&adm), u64::MAX);
        assert!(Throttles::new(vec![]).is_empty());
    }

    #[test]
    fn allowance_is_max_divided_by_transfers() {
        let mut t = Throttles::new(vec![rule("**", 0, 100_000), rule("**.jpg", 0, 30_000)]);
        let a = t.admit("/a.jpg").unwrap();
        assert_eq!(a.rules().collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(t.allowance(&a), 30_000);
        let b = t.admit("/b.html").unwrap();
        assert_eq!(t.allowance(&b), 50_000);
        assert_eq!(t.allowance(&a), 30_000);
        let c = t.admit("/c.jpg").unwrap();
        assert_eq!(t.allowance(&a), 15_000);
        assert_eq!(t.allowance(&c), 15_000);
        let d = t.admit("/d.html").unwrap();
        assert_eq!(t.allowance(&d), 25_000);
        t.finish(&a);
        t.finish(&c);
        assert_eq!(t.allowance(&b), 50_000);
        t.finish(&b);
        t.finish(&d);
        assert!(t.status().all(|s| s.sending == 0));
        // A second finish never underflows.
        t.finish(&d);
        assert!(t.status().all(|s| s.sending == 0));
    }

    #[test]
    fn at_most_ten_rules_per_transfer() {
        let rules = (0..12).map(|i| rule("**", 0, 1000 + i)).collect();
        let mut t = Throttles::new(rules);
        let a = t.admit("/x").unwrap();
        assert_eq!(a.rules().count(), MAX_THROTTLES_PER_CONN);
        let sending: Vec<u64> = t.status().map(|s| s.sending).collect();
        assert_eq!(sending, vec![1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]);
        assert_eq!(t.allowance(&a), 1000);
    }

    #[test]
    fn above_twice_the_maximum_is_refused() {
        let mut t = Throttles::new(vec![rule("**", 0, 1000)]);
        let a = t.admit("/big").unwrap();
        // 10 000 bytes in 2 s = 5000 B/s; rate = (0 + 5000) / 3 = 1666: above max, not 2×max.
        t.sent(&a, 10_000);
        t.update(Duration::from_secs(2));
        assert_eq!(t.status().next().unwrap().rate, 1666);
        let b = t.admit("/big").unwrap();
        t.finish(&b);
        // Another 2 s at 5000 B/s: (2·1666 + 5000) / 3 = 2777 > 2000 → 503.
        t.sent(&a, 10_000);
        t.update(Duration::from_secs(2));
        assert_eq!(t.status().next().unwrap().rate, 2777);
        assert_eq!(t.admit("/big"), Err(()));
        assert_eq!(t.status().next().unwrap().sending, 1, "a refused request registers nothing");
        // Idle time decays the rate until requests are admitted again.
        t.finish(&a);
        t.update(Duration::from_secs(2));
        assert_eq!(t.status().next().unwrap().rate, 1851);
        assert!(t.admit("/big").is_ok());
    }

    #[test]
    fn the_minimum_is_a_floor_on_each_share() {
        // 100000-200000: two at once get 100 kB/s each; a third would get 66 kB/s.
        let mut t = Throttles::new(vec![rule("**.bin", 100_000, 200_000)]);
        let a = t.admit("/a.bin").unwrap();
        // At once, with the rolling rate still 0 (thttpd refuses here).
        let b = t.admit("/b.bin").unwrap();
        assert_eq!(t.allowance(&a), 100_000);
        assert_eq!(t.admit("/c.bin"), Err(()), "a third would get less than the minimum");
        assert_eq!(t.status().next().unwrap().sending, 2, "a refusal registers nothing");
        // However slowly the two run, a slot that comes free is taken again.
        t.update(Duration::from_secs(2));
        t.finish(&a);
        let c = t.admit("/c.bin").unwrap();
        t.finish(&b);
        t.finish(&c);
        assert!(t.status().all(|s| s.sending == 0));
        // min == max: one at a time.
        let mut t = Throttles::new(vec![rule("**", 5000, 5000)]);
        let one = t.admit("/x").unwrap();
        assert_eq!(t.admit("/y"), Err(()));
        t.finish(&one);
        assert!(t.admit("/y").is_ok());
        // A rule refusing stops the whole admission even if another rule would admit.
        let mut t = Throttles::new(vec![rule("**", 60_000, 100_000), rule("**.jpg", 0, 50)]);
        let first = t.admit("/a.html").unwrap();
        assert_eq!(t.admit("/a.jpg"), Err(()));
        assert_eq!(t.status().map(|s| s.sending).collect::<Vec<_>>(), vec![1, 0]);
        t.finish(&first);
    }

    #[test]
    fn a_reload_keeps_unchanged_rules_and_isolates_changed_ones() {
        let rules = vec![rule("**.bin", 100_000, 200_000)];
        let mut t = Throttles::new(rules.clone());
        let a = t.admit("/a.bin").unwrap();
        let b = t.admit("/b.bin").unwrap();
        // The same rules: the two running transfers still count.
        let mut t = t.reload(&rules);
        assert!(t.owns(&a));
        assert_eq!(t.admit("/c.bin"), Err(()));
        // Changed rules: fresh counts; the old transfers neither count nor take counts away.
        let mut t = t.reload(&[rule("**.bin", 100_000, 200_000), rule("**.iso", 0, 10)]);
        assert!(!t.owns(&a));
        let c = t.admit("/c.bin").unwrap();
        let d = t.admit("/d.bin").unwrap();
        t.sent(&a, 1_000_000);
        t.finish(&a);
        t.finish(&b);
        assert_eq!(t.status().next().unwrap().sending, 2);
        assert_eq!(t.admit("/e.bin"), Err(()), "two run under the new rules");
        t.update(Duration::from_secs(2));
        assert_eq!(t.status().next().unwrap().rate, 0, "bytes of an old transfer are not counted");
        t.finish(&c);
        t.finish(&d);
    }

    #[test]
    fn floor_rate_is_half_the_allowance_capped_by_min_send_rate() {
        assert_eq!(floor_rate(512, 100_000), 512, "never stricter than for an unpaced transfer");
        assert_eq!(floor_rate(100_000, 50_000), 25_000);
        assert_eq!(floor_rate(512, 600), 300);
        assert_eq!(floor_rate(0, 50_000), 0, "min_send_rate = 0 turns the check off");
        assert_eq!(floor_rate(512, u64::MAX), 512);
    }

    #[test]
    fn update_uses_the_real_elapsed_time() {
        let mut t = Throttles::new(vec![rule("**", 0, 1_000_000)]);
        let a = t.admit("/x").unwrap();
        t.sent(&a, 300_000);
        t.update(Duration::ZERO);
        assert_eq!(t.status().next().unwrap().rate, 0, "zero elapsed keeps the bytes");
        t.update(Duration::from_millis(500)); // 600 000 B/s → 200 000
        assert_eq!(t.status().next().unwrap().rate, 200_000);
        t.update(Duration::from_secs(2));
        assert_eq!(t.status().next().unwrap().rate, 133_333);
    }

    #[test]
    fn vhost_paths() {
        let mut t = Throttles::new(vec![rule("example.com/**", 0, 500)]);
        assert!(t.admit("other.org/a").unwrap().is_empty());
        assert!(!t.admit("example.com/a").unwrap().is_empty());
        assert!(!t.admit("/example.com/a/b.jpg").unwrap().is_empty());
    }

    /// Drives a limiter like the loop does: whenever at least `chunk` bytes are allowed, send
    /// them; otherwise jump to `next_at`. Returns the bytes sent in `[start, start+span)`.
    fn simulate(lim: &mut RateLimiter, start: Instant, span: Duration, chunk: u64) -> u64 {
        let end = start + span;
        let mut now = start;
        let mut total = 0;
        let mut wakeups = 0;
        while now < end {
            let n = lim.allowed(now, chunk);
            if n > 0 {
                lim.consume(n);
                total += n;
            }
            now = match lim.next_at(now, chunk) {
                Some(t) => t.max(now + Duration::from_micros(1)),
                None => now + Duration::from_micros(1),
            };
            wakeups += 1;
            assert!(wakeups < 10_000_000);
        }
        total
    }

    #[test]
    fn limiter_paces_200_kb_per_second() {
        let t0 = Instant::now();
        let chunk = 16 * 1024;
        let mut lim = RateLimiter::new(200_000, 0, t0);
        // The first second includes the initial burst (a quarter second).
        let first = simulate(&mut lim, t0, Duration::from_secs(1), chunk);
        assert!((200_000..=250_000 + chunk).contains(&first), "{first}");
        for s in 1..6 {
            let start = t0 + Duration::from_secs(s);
            let sec = simulate(&mut lim, start, Duration::from_secs(1), chunk);
            assert!(sec.abs_diff(200_000) <= chunk, "second {s}: {sec}");
        }
        // Over a long span the average is exact.
        let mut lim = RateLimiter::new(200_000, 0, t0);
        let total = simulate(&mut lim, t0, Duration::from_secs(60), chunk);
        assert!(total.abs_diff(60 * 200_000 + 50_000) <= chunk, "{total}");
    }

    #[test]
    fn limiter_small_rates_and_tiny_steps() {
        let t0 = Instant::now();
        let mut lim = RateLimiter::new(2000, 0, t0);
        assert_eq!(lim.allowed(t0, 10_000), 500, "starts with a quarter second");
        lim.consume(500);
        assert_eq!(lim.allowed(t0, 10_000), 0);
        // Many tiny steps lose nothing to rounding.
        let mut now = t0;
        let mut got = 0;
        for _ in 0..1000 {
            now += Duration::from_micros(1000);
            let n = lim.allowed(now, u64::MAX);
            lim.consume(n);
            got += n;
        }
        assert_eq!(got, 2000);
    }

    #[test]
    fn limiter_next_at() {
        let t0 = Instant::now();
        let mut lim = RateLimiter::new(1000, 0, t0);
        assert_eq!(lim.next_at(t0, 100), None);
        let n = lim.allowed(t0, u64::MAX);
        assert_eq!(n, 250);
        lim.consume(n);
        assert_eq!(lim.next_at(t0, 100), Some(t0 + Duration::from_millis(100)));
        // min_chunk above the burst is capped at the burst, so the wait is finite.
        assert_eq!(lim.next_at(t0, 1_000_000), Some(t0 + Duration::from_millis(250)));
        let later = t0 + Duration::from_millis(40);
        assert_eq!(lim.next_at(later, 100), Some(t0 + Duration::from_millis(100)));
        assert_eq!(lim.allowed(t0 + Duration::from_millis(100), u64::MAX), 100);
    }

    #[test]
    fn limiter_after_and_unlimited() {
        let t0 = Instant::now();
        let mut lim = RateLimiter::new(1000, 10_000, t0);
        assert_eq!(lim.allowed(t0, u64::MAX), 10_250);
        lim.consume(9_000);
        assert_eq!(lim.allowed(t0, u64::MAX), 1_250);
        lim.consume(1_250);
        assert_eq!(lim.allowed(t0, u64::MAX), 0);
        assert!(lim.next_at(t0, 1).is_some());
        for rate in [0, u64::MAX] {
            let mut lim = RateLimiter::new(rate, 0, t0);
            assert_eq!(lim.allowed(t0, 123_456_789), 123_456_789);
            lim.consume(u64::MAX);
            assert_eq!(lim.next_at(t0, u64::MAX), None);
        }
    }

    #[test]
    fn limiter_set_rate() {
        let t0 = Instant::now();
        let mut lim = RateLimiter::new(100_000, 0, t0);
        lim.set_rate(4000);
        assert_eq!(lim.rate(), 4000);
        assert_eq!(lim.allowed(t0, u64::MAX), 1000, "tokens are capped at the new burst");
        lim.consume(1000);
        lim.set_rate(u64::MAX);
        assert_eq!(lim.allowed(t0, 77), 77);
    }

    #[test]
    fn limiter_time_going_backwards_is_harmless() {
        let t0 = Instant::now() + Duration::from_secs(10);
        let mut lim = RateLimiter::new(1000, 0, t0);
        let n = lim.allowed(t0, u64::MAX);
        lim.consume(n);
        let earlier = t0 - Duration::from_secs(5);
        assert_eq!(lim.allowed(earlier, u64::MAX), 0);
        assert!(lim.next_at(earlier, 10).is_some());
        assert_eq!(lim.allowed(t0 + Duration::from_secs(1), u64::MAX), 250);
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("50000"), Some(50_000));
        assert_eq!(parse_rate("200KiB/s"), Some(204_800));
        assert_eq!(parse_rate("1MB/s"), Some(1_000_000));
        assert_eq!(parse_rate("1.5MiB/s"), Some(1_572_864));
        assert_eq!(parse_rate(" 10 k "), Some(10_000));
        assert_eq!(parse_rate("2gib"), Some(2 << 30));
        assert_eq!(parse_rate("100B/s"), Some(100));
        assert_eq!(parse_rate("0.5KB"), Some(500));
        assert_eq!(parse_rate(".5kb"), Some(500));
        assert_eq!(parse_rate("0"), Some(0));
        for bad in
            ["", "/s", "k", "fast", "1.2.3", "-5", "5 kbit", "1e6", "99999999999999999999999", "18446744073709551616"]
        {
            assert_eq!(parse_rate(bad), None, "{bad}");
        }
        assert_eq!(parse_rate("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_rate("20000000000GB"), None);
    }
}
