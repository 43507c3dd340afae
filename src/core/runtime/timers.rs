//! One named timer table (quinn-proto keeps one too): every wake-up a
//! machine needs is a key here, so `poll_timeout` is one lookup and
//! `handle_timeout` one sweep.

use crate::core::Millis;

/// Timers by key: at most one per key; setting a key again moves it.
/// A plain `Vec`: a machine arms a handful to a few hundred timers, and a
/// scan is cheaper in code (wasm bytes per key type) than two B-trees.
pub(crate) struct Timers<K: Ord + Copy> {
    armed: Vec<(Millis, K)>,
}

impl<K: Ord + Copy> Default for Timers<K> {
    fn default() -> Self {
        Timers { armed: Vec::new() }
    }
}

impl<K: Ord + Copy> Timers<K> {
    /// Arms `key` for `at` (replacing an earlier setting).
    pub(crate) fn set(&mut self, key: K, at: Millis) {
        match self.armed.iter_mut().find(|(_, k)| *k == key) {
            Some(slot) => slot.0 = at,
            None => self.armed.push((at, key)),
        }
    }

    /// Disarms `key`.
    pub(crate) fn clear(&mut self, key: K) {
        self.armed.retain(|(_, k)| *k != key);
    }

    /// The earliest armed timer.
    pub(crate) fn next(&self) -> Option<Millis> {
        self.armed.iter().map(|(at, _)| *at).min()
    }

    /// Disarms and returns every key due at `now`, earliest first (ties in key order).
    pub(crate) fn take_due(&mut self, now: Millis) -> Vec<K> {
        let mut due: Vec<(Millis, K)> = Vec::new();
        self.armed.retain(|&(at, k)| {
            if at <= now {
                due.push((at, k));
                false
            } else {
                true
            }
        });
        crate::core::runtime::small_sort::sort_by_key(&mut due, |d| *d);
        due.into_iter().map(|(_, k)| k).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_in_order_and_moves_on_reset() {
        let mut t = Timers::default();
        t.set('a', 30);
        t.set('b', 10);
        t.set('c', 20);
        t.set('a', 5); // moved earlier: fires once, at 5
        assert_eq!(t.next(), Some(5));
        assert_eq!(t.take_due(15), vec!['a', 'b']);
        assert_eq!(t.take_due(15), vec![], "a fired timer is disarmed");
        t.clear('c');
        assert_eq!((t.next(), t.take_due(100)), (None, vec![]));
    }
}
