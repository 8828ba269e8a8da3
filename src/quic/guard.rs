//! The defences an HTTP/3 connection keeps across turns (`quic::h3`'s `H3Conn`), as
//! `h2::session` and `conn::h2` have them for HTTP/2, in one small state with pure methods
//! (unit-tested here; the glue calls them at a few points of its turn). The two budgets are
//! `http::budget::Budget`s, as `h2::session`'s are:
//!
//! * **Rapid Reset** (`[http3] reset_budget`, as `[http2] reset_budget`): requests the
//!   client cancels before their response is complete spend the budget, each completed
//!   response earns one back (never more than the budget); spent, the connection is closed
//!   with H3_EXCESSIVE_LOAD.
//! * **Flood** (`[http3] flood_budget`, as `[http2] flood_budget`): frames and stream events
//!   that do no work (the `h3` layer counts them: unknown and reserved frame types,
//!   PRIORITY_UPDATE and the other control frames after SETTINGS, empty DATA frames,
//!   streams of unknown types, QPACK instructions with no effect; and requests answered
//!   with a stream reset) spend it, each completed response earns one back; spent, the
//!   connection is closed with H3_EXCESSIVE_LOAD.
//! * **Stall** (`[http] send_timeout`): responses that wait with none of their bytes taken
//!   by QUIC for that long close the connection (H3_NO_ERROR).
//! * **Slow reader** (`[http] min_send_rate`, as over TCP): once responses have been in
//!   flight without a break for longer than `send_timeout`, the bytes QUIC took of them
//!   (which the client's flow control lets it take only as the client reads) must average
//!   at least `min_send_rate` per second since the first of them started (a transfer we pace
//!   ourselves, half the rate it is allowed if that is lower, `throttle::floor_rate`), else
//!   the connection is closed (H3_NO_ERROR); one that took nothing at all is the stall's
//!   to end. Per connection, not per response: streams share
//!   the connection and take turns by urgency, so one may rightly wait while others send.

use std::time::{Duration, Instant};

use crate::http::budget::Budget;

/// See the module documentation.
#[derive(Debug)]
pub(super) struct Guard {
    /// What is left of `[http3] reset_budget`.
    resets: Budget,
    /// What is left of `[http3] flood_budget`.
    flood: Budget,
    /// Since when responses have been in flight without a break (None while none is), and
    /// the bytes of them QUIC took since then.
    busy_since: Option<Instant>,
    taken: u64,
    /// Since when responses have waited with none of their bytes taken by QUIC (the client
    /// opens no window, or acknowledges nothing); None while none waits.
    stalled: Option<Instant>,
}

/// What [`Guard::sent`] makes of a turn.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Stall {
    /// No response waits, or one made progress.
    No,
    /// Responses wait: look again at this time.
    Until(Instant),
    /// None made progress for `send_timeout`: close the connection.
    Expired,
}

impl Guard {
    pub(super) fn new(reset_budget: u32, flood_budget: u32) -> Guard {
        Guard {
            resets: Budget::new(reset_budget),
            flood: Budget::new(flood_budget),
            busy_since: None,
            taken: 0,
            stalled: None,
        }
    }

    /// A request was cancelled before its response was complete.
    pub(super) fn cancelled(&mut self) {
        self.resets.spend(1);
    }

    /// A response completed: one cancellation and one idle frame more are allowed, up to
    /// their budgets.
    pub(super) fn completed(&mut self) {
        self.resets.earn();
        self.flood.earn();
    }

    /// `n` frames or stream events that did no work arrived.
    pub(super) fn idle(&mut self, n: u32) {
        self.flood.spend(n);
    }

    /// The flood budget is spent: the connection is closed (H3_EXCESSIVE_LOAD).
    pub(super) fn flooded(&self) -> bool {
        self.flood.is_spent()
    }

    /// QUIC took `n` bytes of responses.
    pub(super) fn took(&mut self, n: u64) {
        self.taken += n;
    }

    /// `[http] min_send_rate` at the end of a turn at `now` (after [`Guard::took`] for its
    /// bytes): `waiting`, responses are in flight; `floor(min_rate)`, the rate they must
    /// keep, lower for paced transfers (asked only when they fall below `min_rate`).
    pub(super) fn rate(
        &mut self,
        waiting: bool,
        now: Instant,
        send_timeout: Duration,
        min_rate: u64,
        floor: impl FnOnce(u64) -> u64,
    ) -> Stall {
        if !waiting || min_rate == 0 {
            self.busy_since = None;
            self.taken = 0;
            return Stall::No;
        }
        let since = *self.busy_since.get_or_insert(now);
        let age = now.saturating_duration_since(since);
        if age <= send_timeout {
            return Stall::Until(since + send_timeout + Duration::from_millis(1));
        }
        if self.taken == 0 {
            // Nothing taken at all: the stall deadline (`sent`, from the last progress) ends
            // it, under its own name.
            return Stall::No;
        }
        let below = |rate: u64| (self.taken as f64) < rate as f64 * age.as_secs_f64();
        let mut rate = min_rate;
        if below(rate) {
            rate = floor(min_rate);
            if rate == 0 {
                return Stall::No;
            }
            if below(rate) {
                return Stall::Expired;
            }
        }
        // When the average falls below the rate if nothing more is taken.
        let at = Duration::try_from_secs_f64(self.taken as f64 / rate as f64)
            .ok()
            .and_then(|d| since.checked_add(d))
            .filter(|&t| t > now)
            .unwrap_or(now + Duration::from_millis(10));
        Stall::Until(at)
    }

    /// The budget of cancellations is spent: the connection is closed (H3_EXCESSIVE_LOAD).
    pub(super) fn spent(&self) -> bool {
        self.resets.is_spent()
    }

    /// A turn of sending ended at `now`: `waiting`, responses wait to be sent; `moved`,
    /// QUIC took bytes of at least one.
    pub(super) fn sent(&mut self, waiting: bool, moved: bool, now: Instant, send_timeout: Duration) -> Stall {
        if moved || !waiting {
            self.stalled = None;
            return Stall::No;
        }
        let t = *self.stalled.get_or_insert(now) + send_timeout;
        if t <= now {
            Stall::Expired
        } else {
            Stall::Until(t)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rapid Reset: the budget is spent after `reset_budget` cancellations in a row; each
    /// completed response allows one more, never more than the budget.
    #[test]
    fn cancellations_spend_the_budget_completions_refill_it() {
        for budget in [10, 200, 1000] {
            let mut g = Guard::new(budget, 1000);
            for _ in 0..budget - 1 {
                g.cancelled();
            }
            assert!(!g.spent());
            g.completed();
            g.cancelled();
            assert!(!g.spent());
            g.cancelled();
            assert!(g.spent(), "{budget}");
            // Completions beyond the budget are not banked.
            let mut g = Guard::new(budget, 1000);
            for _ in 0..1000 {
                g.completed();
            }
            for _ in 0..budget - 1 {
                g.cancelled();
            }
            assert!(!g.spent(), "{budget}");
            g.cancelled();
            assert!(g.spent(), "{budget}");
        }
    }

    /// send_timeout: counted from the first turn responses waited and none moved, renewed
    /// by progress, forgotten when none waits.
    #[test]
    fn a_stall_expires_after_send_timeout_unless_bytes_move() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let timeout = Duration::from_secs(30);
        let mut g = Guard::new(200, 1000);
        assert_eq!(g.sent(true, true, s(0), timeout), Stall::No);
        assert_eq!(g.sent(true, false, s(1), timeout), Stall::Until(s(31)));
        // Later turns without progress keep the first stalled moment.
        assert_eq!(g.sent(true, false, s(20), timeout), Stall::Until(s(31)));
        assert_eq!(g.sent(true, false, s(31), timeout), Stall::Expired);
        // Progress renews it.
        let mut g = Guard::new(200, 1000);
        assert_eq!(g.sent(true, false, s(1), timeout), Stall::Until(s(31)));
        assert_eq!(g.sent(true, true, s(25), timeout), Stall::No);
        assert_eq!(g.sent(true, false, s(40), timeout), Stall::Until(s(70)));
        // Nothing waiting: no stall, whatever moved.
        assert_eq!(g.sent(false, false, s(100), timeout), Stall::No);
        assert_eq!(g.sent(true, false, s(101), timeout), Stall::Until(s(131)));
    }

    /// Flood: `flood_budget` idle frames close the connection (the last one spends it, as
    /// HTTP/2's), completed responses earn them back up to the budget, and a batch counts
    /// whole.
    #[test]
    fn idle_frames_spend_the_flood_budget_completions_refill_it() {
        let mut g = Guard::new(200, 100);
        g.idle(99);
        assert!(!g.flooded());
        g.completed();
        g.idle(1);
        assert!(!g.flooded());
        g.idle(1);
        assert!(g.flooded());
        let mut g = Guard::new(200, 100);
        for _ in 0..500 {
            g.completed();
        }
        g.idle(100);
        assert!(g.flooded());
        // Each budget is its own: cancellations do not spend the flood budget.
        let mut g = Guard::new(200, 100);
        for _ in 0..150 {
            g.cancelled();
        }
        assert!(!g.flooded() && !g.spent());
    }

    /// min_send_rate: nothing is asked before `send_timeout` (a wake-up then), then the
    /// average since the responses started; a paced floor is asked only below the rate;
    /// a break in the responses starts the count again.
    #[test]
    fn a_slow_reader_is_cut_after_send_timeout_a_fast_one_is_not() {
        let t0 = Instant::now();
        let s = |ms: u64| t0 + Duration::from_millis(ms);
        let timeout = Duration::from_secs(2);
        let never = |_| -> u64 { panic!("the floor is asked only below the rate") };
        // 1,000 B/s required; 500 B/s taken: cut once past send_timeout.
        let mut g = Guard::new(200, 1000);
        assert_eq!(g.rate(true, s(0), timeout, 1000, never), Stall::Until(s(2001)));
        g.took(1000);
        assert_eq!(g.rate(true, s(2000), timeout, 1000, never), Stall::Until(s(2001)));
        assert_eq!(g.rate(true, s(2500), timeout, 1000, |m| m), Stall::Expired);
        // 1,500 B/s: the wake-up is when the average would fall to the rate.
        let mut g = Guard::new(200, 1000);
        assert_eq!(g.rate(true, s(0), timeout, 1000, never), Stall::Until(s(2001)));
        g.took(4500);
        assert_eq!(g.rate(true, s(3000), timeout, 1000, never), Stall::Until(s(4500)));
        assert_eq!(g.rate(true, s(4600), timeout, 1000, |m| m), Stall::Expired);
        // A paced transfer is held to its lower floor; a floor of 0 turns the check off.
        let mut g = Guard::new(200, 1000);
        g.rate(true, s(0), timeout, 1000, never);
        g.took(1500);
        assert_eq!(g.rate(true, s(3000), timeout, 1000, |_| 400), Stall::Until(s(3750)));
        assert_eq!(g.rate(true, s(3000), timeout, 1000, |_| 0), Stall::No);
        // No response in flight: forgotten; the next start counts from scratch.
        assert_eq!(g.rate(false, s(5000), timeout, 1000, never), Stall::No);
        assert_eq!(g.rate(true, s(6000), timeout, 1000, never), Stall::Until(s(8001)));
        g.took(10);
        assert_eq!(g.rate(true, s(9000), timeout, 1000, |m| m), Stall::Expired);
        // Nothing taken at all is the stall's to end (`sent`), not this check's.
        let mut g = Guard::new(200, 1000);
        g.rate(true, s(0), timeout, 1000, never);
        assert_eq!(g.rate(true, s(5000), timeout, 1000, never), Stall::No);
        // min_send_rate = 0: off.
        let mut g = Guard::new(200, 1000);
        assert_eq!(g.rate(true, s(0), timeout, 0, never), Stall::No);
        assert_eq!(g.rate(true, s(60_000), timeout, 0, never), Stall::No);
    }
}
