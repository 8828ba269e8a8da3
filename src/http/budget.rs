//! A budget of things a connection may do that cost us and earn nothing: HTTP/2's and
//! HTTP/3's Rapid Reset and flood defences (`[http2]`/`[http3] reset_budget`,
//! `flood_budget`; `h2::session` and `quic::guard` keep one of each).
//!
//! It starts full at its cap; each cancelled request or each frame that does no work spends
//! from it, each completed response earns one back (never more than the cap: completions are
//! not banked), and an empty budget is spent: the caller closes the connection. So a budget
//! of `cap` is spent at the first moment that some run of events ending then spent `cap` more
//! than it earned (the `cap`-th cancellation in a row is the one that closes), and
//! `left <= cap` always.

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Budget {
    cap: u32,
    left: u32,
}

impl Budget {
    /// A full budget of `cap`.
    pub(crate) fn new(cap: u32) -> Budget {
        Budget { cap, left: cap }
    }

    /// Spends `n` (down to empty, never below); true if the budget is now spent.
    #[inline]
    pub(crate) fn spend(&mut self, n: u32) -> bool {
        self.left = self.left.saturating_sub(n);
        self.is_spent()
    }

    /// Earns one back, up to the cap.
    #[inline]
    pub(crate) fn earn(&mut self) {
        if self.left < self.cap {
            self.left += 1;
        }
    }

    /// Nothing is left: the connection is to be closed.
    #[inline]
    pub(crate) fn is_spent(&self) -> bool {
        self.left == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The thresholds the callers rely on: the `cap`-th spend in a row spends it, an earn in
    /// between allows one more, earns beyond the cap are not banked, a batch counts whole.
    #[test]
    fn the_cap_th_spend_in_a_row_spends_it() {
        for cap in [2, 10, 200, 1000] {
            let mut b = Budget::new(cap);
            for _ in 0..cap - 1 {
                assert!(!b.spend(1), "{cap}");
            }
            b.earn();
            assert!(!b.spend(1) && !b.is_spent(), "{cap}");
            assert!(b.spend(1) && b.is_spent(), "{cap}");
            // Spent, a completion makes room for one more again.
            b.earn();
            assert!(!b.is_spent(), "{cap}");
            let mut b = Budget::new(cap);
            for _ in 0..5000 {
                b.earn();
            }
            assert!(!b.spend(cap - 1), "{cap}");
            assert!(b.spend(1), "{cap}");
            // Below empty is empty: saturating, never wrapping.
            assert!(b.spend(u32::MAX));
            b.earn();
            assert!(!b.is_spent());
        }
        assert!(Budget::new(0).is_spent());
        let mut b = Budget::new(1);
        assert!(!b.spend(0) && b.spend(1));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Spend(u32),
        Earn,
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(prop_oneof![3 => (0u32..4).prop_map(Op::Spend), 2 => Just(Op::Earn)], 0..400)
    }

    proptest! {
        /// After any sequence of spends and earns: `left <= cap`; `left` is what the inline
        /// counters both callers kept before were (`saturating_sub(n)`, `(x + 1).min(cap)`);
        /// and until it is first spent, it is spent exactly when some run of operations
        /// ending then spent `cap` more than it earned.
        #[test]
        fn left_stays_within_the_cap_and_spent_means_cap_more_spent_than_earned(
            cap in 0u32..50,
            ops in ops(),
        ) {
            let mut b = Budget::new(cap);
            let mut old = cap;
            // The most any run of operations ending now spent beyond what it earned (the
            // empty run counts: 0).
            let mut worst_run: i64 = 0;
            let mut ever_spent = b.is_spent();
            prop_assert_eq!(ever_spent, cap == 0);
            for op in ops {
                match op {
                    Op::Spend(n) => {
                        let now = b.spend(n);
                        prop_assert_eq!(now, b.is_spent());
                        old = old.saturating_sub(n);
                        worst_run += i64::from(n);
                    }
                    Op::Earn => {
                        b.earn();
                        old = (old + 1).min(cap);
                        worst_run = (worst_run - 1).max(0);
                    }
                }
                prop_assert!(b.left <= b.cap);
                prop_assert_eq!(b.left, old);
                prop_assert_eq!(b.is_spent(), old == 0);
                if !ever_spent {
                    prop_assert_eq!(b.is_spent(), worst_run >= i64::from(cap));
                }
                ever_spent |= b.is_spent();
            }
        }
    }
}
