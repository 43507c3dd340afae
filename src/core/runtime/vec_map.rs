//! A sorted-`Vec` map with the part of `BTreeMap`'s API the machines use.
//!
//! Why not `BTreeMap`: every key/value pair type instantiates the B-tree's
//! node handling (insert, remove with rebalancing, navigation) anew, about
//! 8 KiB of wasm per map type, and the core has a dozen map types; that was
//! the largest single item of the npm package's wasm. A machine's maps hold
//! a few entries to a few hundred (operations, locks, requests in flight), so
//! a binary search plus a short `memmove` costs nothing measurable, and the
//! code per type is a fraction. Iteration is in key order, like `BTreeMap`'s,
//! which the simulations' determinism relies on.

use std::borrow::Borrow;
use std::ops::{Bound, RangeBounds};

#[derive(Clone, Debug)]
pub(crate) struct VecMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        VecMap {
            entries: Vec::new(),
        }
    }
}

impl<K: Ord, V> VecMap<K, V> {
    pub(crate) fn new() -> Self {
        VecMap {
            entries: Vec::new(),
        }
    }

    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.entries.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }

    /// Inserts or replaces; returns the replaced value.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, value)),
            Err(i) => {
                self.entries.insert(i, (key, value));
                None
            }
        }
    }

    pub(crate) fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &self.entries[i].1)
    }

    pub(crate) fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        match self.find(key) {
            Ok(i) => Some(&mut self.entries[i].1),
            Err(_) => None,
        }
    }

    pub(crate) fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    pub(crate) fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| self.entries.remove(i).1)
    }

    /// The value at `key`, inserted by `make` when absent (`entry().or_insert_with()`).
    pub(crate) fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(&key) {
            Ok(i) => i,
            Err(i) => {
                self.entries.insert(i, (key, make()));
                i
            }
        };
        &mut self.entries[i].1
    }

    /// Removes and returns the entry with the smallest key.
    pub(crate) fn pop_first(&mut self) -> Option<(K, V)> {
        if self.entries.is_empty() {
            None
        } else {
            Some(self.entries.remove(0))
        }
    }

    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        self.entries.retain_mut(|(k, v)| keep(k, v));
    }

    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + ExactSizeIterator {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    pub(crate) fn iter_mut(
        &mut self,
    ) -> impl DoubleEndedIterator<Item = (&K, &mut V)> + ExactSizeIterator {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }

    pub(crate) fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator {
        self.entries.iter().map(|(k, _)| k)
    }

    pub(crate) fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator {
        self.entries.iter().map(|(_, v)| v)
    }

    /// Empties the map, yielding its entries in key order.
    #[cfg_attr(not(feature = "js"), allow(dead_code))] // the JS driver's
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (K, V)> {
        std::mem::take(&mut self.entries).into_iter()
    }

    pub(crate) fn into_keys(self) -> impl Iterator<Item = K> {
        self.entries.into_iter().map(|(k, _)| k)
    }

    /// The entries whose keys lie in `range`, in key order.
    pub(crate) fn range<R: RangeBounds<K>>(
        &self,
        range: R,
    ) -> impl DoubleEndedIterator<Item = (&K, &V)> {
        let start = match range.start_bound() {
            Bound::Included(k) => self.entries.partition_point(|(e, _)| e < k),
            Bound::Excluded(k) => self.entries.partition_point(|(e, _)| e <= k),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(k) => self.entries.partition_point(|(e, _)| e <= k),
            Bound::Excluded(k) => self.entries.partition_point(|(e, _)| e < k),
            Bound::Unbounded => self.entries.len(),
        };
        self.entries[start..end.max(start)]
            .iter()
            .map(|(k, v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Every operation agrees with `BTreeMap`, iteration order included.
        #[test]
        fn behaves_like_btreemap(ops in prop::collection::vec((0u8..6, 0u8..20, any::<u16>()), 0..200)) {
            let mut ours = VecMap::new();
            let mut std_map = BTreeMap::new();
            for (op, k, v) in ops {
                match op {
                    0 | 1 => prop_assert_eq!(ours.insert(k, v), std_map.insert(k, v)),
                    2 => prop_assert_eq!(ours.remove(&k), std_map.remove(&k)),
                    3 => prop_assert_eq!(ours.pop_first(), std_map.pop_first()),
                    4 => {
                        // Wrapping: `v` ranges over every u16, 65535 included.
                        let ours_v = ours.get_or_insert_with(k, || v);
                        *ours_v = ours_v.wrapping_add(1);
                        let std_v = std_map.entry(k).or_insert_with(|| v);
                        *std_v = std_v.wrapping_add(1);
                    }
                    _ => {
                        ours.retain(|key, _| key % 3 != k % 3);
                        std_map.retain(|key, _| key % 3 != k % 3);
                    }
                }
                prop_assert_eq!(ours.get(&k), std_map.get(&k));
                prop_assert_eq!(ours.len(), std_map.len());
                prop_assert!(ours.iter().eq(std_map.iter()));
                let (lo, hi) = (k.min(10), k.max(10));
                prop_assert!(ours.range(lo..hi).eq(std_map.range(lo..hi)));
                prop_assert!(ours.range(lo..=hi).eq(std_map.range(lo..=hi)));
                prop_assert!(ours.range(lo..).eq(std_map.range(lo..)));
            }
        }
    }
}
