//! The arithmetic of Redlock, as pure functions: quorum size, clock-drift
//! allowance, validity, how an attempt turned out and when to try again.
//! The single-node lock uses the same functions with N = 1.

use crate::core::Millis;

/// ⌊N/2⌋ + 1: any two quorums of the same N nodes share at least one node.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// The clock-drift allowance for a TTL: `ttl × drift_factor + 2 ms`
/// (rounded up), as in the Redlock description.
pub fn drift_ms(ttl_ms: u64, drift_factor: f64) -> u64 {
    let f = if drift_factor.is_finite() && drift_factor > 0.0 {
        drift_factor
    } else {
        0.0
    };
    (ttl_ms as f64 * f).ceil() as u64 + 2
}

/// `ttl − elapsed − drift` if positive. `elapsed` must be measured from the
/// start of the attempt (or renewal round) whose keys establish the
/// validity, never from an earlier one.
pub fn validity_ms(ttl_ms: u64, elapsed_ms: u64, drift_factor: f64) -> Option<u64> {
    ttl_ms
        .checked_sub(elapsed_ms)
        .and_then(|v| v.checked_sub(drift_ms(ttl_ms, drift_factor)))
        .filter(|v| *v > 0)
}

/// The conservative end of validity of a round that started at `start`,
/// if the lock is still valid at `now`.
pub fn expires_at(start: Millis, now: Millis, ttl_ms: u64, drift_factor: f64) -> Option<Millis> {
    validity_ms(ttl_ms, now.saturating_sub(start), drift_factor).map(|v| now + v)
}

/// What one attempt's per-node answers add up to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptVerdict {
    /// A quorum granted (validity still to be checked).
    Quorum,
    /// The nodes that answered at all cannot form a quorum.
    Unavailable,
    /// A quorum answered, but others hold enough of it that we did not get one
    /// (contention, or a split vote between several acquirers).
    Contended,
}

/// Classifies one attempt on `n` nodes, of which `granted` gave us the lock and
/// `held_by_others` answered that someone else holds it.
pub fn verdict(n: usize, granted: usize, held_by_others: usize) -> AttemptVerdict {
    let q = quorum(n);
    if granted >= q {
        AttemptVerdict::Quorum
    } else if granted + held_by_others < q {
        AttemptVerdict::Unavailable
    } else {
        AttemptVerdict::Contended
    }
}

/// After a contended attempt: how long until a quorum of nodes could be free,
/// judging from the remaining lifetimes of the other holders' keys
/// (`None` in `pttls`: a key without expiry). Nodes that did not answer or
/// were granted count as free. `None` when no estimate is possible (a split
/// vote, or keys without expiry).
pub fn free_quorum_in(n: usize, mut pttls: Vec<Option<u64>>) -> Option<u64> {
    let q = quorum(n);
    let free_now = n.saturating_sub(pttls.len());
    if free_now >= q {
        return Some(0);
    }
    let need = q - free_now;
    crate::core::runtime::small_sort::sort_by_key(&mut pttls, |p| p.unwrap_or(u64::MAX));
    pttls.get(need - 1).copied().flatten()
}

/// The k-th largest (1-based) of `values`, e.g. the lifetime that a quorum
/// of nodes is known to have left.
pub fn kth_largest(mut values: Vec<u64>, k: usize) -> Option<u64> {
    if k == 0 || k > values.len() {
        return None;
    }
    crate::core::runtime::small_sort::sort_by_key(&mut values, |v| std::cmp::Reverse(*v));
    values.get(k - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn examples() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(5), 3);
        assert_eq!(quorum(4), 3);
        assert_eq!(drift_ms(10_000, 0.01), 102);
        assert_eq!(validity_ms(10_000, 100, 0.01), Some(9_798));
        assert_eq!(validity_ms(10_000, 9_898, 0.01), None);
        assert_eq!(validity_ms(100, 500, 0.01), None);
        assert_eq!(verdict(5, 3, 0), AttemptVerdict::Quorum);
        assert_eq!(verdict(5, 2, 0), AttemptVerdict::Unavailable);
        assert_eq!(verdict(5, 2, 1), AttemptVerdict::Contended);
        assert_eq!(verdict(5, 0, 3), AttemptVerdict::Contended);
        assert_eq!(
            free_quorum_in(5, vec![Some(300), Some(100), Some(200)]),
            Some(100)
        );
        assert_eq!(
            free_quorum_in(5, vec![Some(300), Some(100), Some(200), Some(50)]),
            Some(100)
        );
        assert_eq!(free_quorum_in(1, vec![Some(70)]), Some(70));
        assert_eq!(free_quorum_in(1, vec![None]), None);
        assert_eq!(free_quorum_in(5, vec![Some(1)]), Some(0));
        assert_eq!(kth_largest(vec![5, 9, 1], 2), Some(5));
        assert_eq!(kth_largest(vec![5], 2), None);
    }

    proptest! {
        #[test]
        fn two_quorums_always_intersect(n in 1usize..100) {
            prop_assert!(2 * quorum(n) > n);
            prop_assert!(quorum(n) <= n);
        }

        #[test]
        fn validity_is_never_more_than_ttl_minus_drift_and_shrinks_with_time(
            ttl in 1u64..100_000_000, e1 in 0u64..200_000_000, e2 in 0u64..200_000_000, f in 0.0f64..0.5,
        ) {
            let (a, b) = (e1.min(e2), e1.max(e2));
            if let Some(v) = validity_ms(ttl, a, f) {
                prop_assert!(v + a + drift_ms(ttl, f) <= ttl);
                prop_assert!(v > 0);
            }
            prop_assert!(validity_ms(ttl, b, f).unwrap_or(0) <= validity_ms(ttl, a, f).unwrap_or(0));
            prop_assert!(drift_ms(ttl, f) as f64 >= ttl as f64 * f + 2.0);
        }

        #[test]
        fn verdicts_partition_the_outcomes((n, g, h) in (1usize..12).prop_flat_map(|n| (Just(n), 0..=n))
            .prop_flat_map(|(n, g)| (Just(n), Just(g), 0..=n - g)))
        {
            let v = verdict(n, g, h);
            prop_assert_eq!(v == AttemptVerdict::Quorum, g >= quorum(n));
            // Unavailable only when even a perfect split of the answers could not make a quorum.
            prop_assert_eq!(v == AttemptVerdict::Unavailable, g < quorum(n) && g + h < quorum(n));
        }

        #[test]
        fn free_quorum_estimate_is_one_of_the_lifetimes((n, p) in (1usize..10)
            .prop_flat_map(|n| (Just(n), proptest::collection::vec(0u64..10_000, 0..=n))))
        {
            let t = free_quorum_in(n, p.iter().copied().map(Some).collect());
            let t = t.unwrap();
            // After t, at least a quorum of nodes are free.
            let free_after = n - p.iter().filter(|x| **x > t).count();
            prop_assert!(free_after >= quorum(n));
            prop_assert!(t == 0 || p.contains(&t));
            // And not before: one ms earlier fewer than a quorum are free.
            if t > 0 {
                let free_before = n - p.iter().filter(|x| **x > t - 1).count();
                prop_assert!(free_before < quorum(n));
            }
        }
    }
}
