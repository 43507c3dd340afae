//! One named timer table (quinn-proto keeps one too): every wake-up a
//! machine needs is a key here, so `poll_timeout` is one lookup and
//! `handle_timeout` one sweep.

use std::collections::{BTreeMap, BTreeSet};

use crate::core::Millis;

/// Timers by key: at most one per key; setting a key again moves it.
pub(crate) struct Timers<K: Ord + Copy> {
    by_key: BTreeMap<K, Millis>,
    by_time: BTreeSet<(Millis, K)>,
}

impl<K: Ord + Copy> Default for Timers<K> {
    fn default() -> Self {
        Timers { by_key: BTreeMap::new(), by_time: BTreeSet::new() }
    }
}

impl<K: Ord + Copy> Timers<K> {
    /// Arms `key` for `at` (replacing an earlier setting).
    pub(crate) fn set(&mut self, key: K, at: Millis) {
        self.clear(key);
        self.by_key.insert(key, at);
        self.by_time.insert((at, key));
    }

    /// Disarms `key`.
    pub(crate) fn clear(&mut self, key: K) {
        if let Some(at) = self.by_key.remove(&key) {
            self.by_time.remove(&(at, key));
        }
    }

    /// The earliest armed timer.
    pub(crate) fn next(&self) -> Option<Millis> {
        self.by_time.first().map(|(at, _)| *at)
    }

    /// Disarms and returns every key due at `now`, earliest first.
    pub(crate) fn take_due(&mut self, now: Millis) -> Vec<K> {
        let mut due = Vec::new();
        while let Some(&(at, key)) = self.by_time.first() {
            if at > now {
                break;
            }
            self.by_time.pop_first();
            self.by_key.remove(&key);
            due.push(key);
        }
        due
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
