//! The defences an HTTP/3 connection keeps across turns (`quic::h3`'s `H3Conn`), as
//! `h2::session` and `conn::h2` have them for HTTP/2, in one small state with pure methods
//! (unit-tested here; the glue calls them at a few points of its turn):
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

use std::time::{Duration, Instant};

/// See the module documentation.
#[derive(Debug)]
pub(super) struct Guard {
    /// `[http3] reset_budget`, and what is left of it.
    reset_budget: u32,
    resets: u32,
    /// `[http3] flood_budget`, and what is left of it.
    flood_budget: u32,
    flood: u32,
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
        Guard { reset_budget, resets: reset_budget, flood_budget, flood: flood_budget, stalled: None }
    }

    /// A request was cancelled before its response was complete.
    pub(super) fn cancelled(&mut self) {
        self.resets = self.resets.saturating_sub(1);
    }

    /// A response completed: one cancellation and one idle frame more are allowed, up to
    /// their budgets.
    pub(super) fn completed(&mut self) {
        self.resets = (self.resets + 1).min(self.reset_budget);
        self.flood = (self.flood + 1).min(self.flood_budget);
    }

    /// `n` frames or stream events that did no work arrived.
    pub(super) fn idle(&mut self, n: u32) {
        self.flood = self.flood.saturating_sub(n);
    }

    /// The flood budget is spent: the connection is closed (H3_EXCESSIVE_LOAD).
    pub(super) fn flooded(&self) -> bool {
        self.flood == 0
    }

    /// The budget of cancellations is spent: the connection is closed (H3_EXCESSIVE_LOAD).
    pub(super) fn spent(&self) -> bool {
        self.resets == 0
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
}
