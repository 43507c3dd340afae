//! A stable insertion sort for the core's short lists (timers due at once,
//! one answer per Redlock node, the waiters of one etcd lock).
//!
//! Why not `slice::sort*`: each element type instantiates the standard
//! library's driftsort or ipnsort anew, 3-8 KiB of wasm each; this is a
//! couple of hundred bytes, and quadratic time is nothing at these lengths.

pub(crate) fn sort_by_key<T, K: Ord>(v: &mut [T], mut key: impl FnMut(&T) -> K) {
    for i in 1..v.len() {
        let mut j = i;
        // `>` (not `>=`) keeps equal keys in their original order.
        while j > 0 && key(&v[j - 1]) > key(&v[j]) {
            v.swap(j - 1, j);
            j -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn agrees_with_the_standard_stable_sort(v in prop::collection::vec((0u8..8, any::<u16>()), 0..60)) {
            let mut ours = v.clone();
            let mut std_sorted = v;
            sort_by_key(&mut ours, |p| p.0);
            std_sorted.sort_by_key(|p| p.0);
            prop_assert_eq!(ours, std_sorted);
        }
    }
}
