//! The OS CSPRNG as the core's [`Entropy`].

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::core::Entropy;

/// Owner tokens and jitter from `getrandom`.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn fill(&mut self, buf: &mut [u8]) {
        if getrandom::getrandom(buf).is_ok() {
            return;
        }
        // getrandom does not fail on the platforms this driver runs on; should it,
        // std's randomly keyed SipHash (itself seeded from the OS) over a counter
        // and the clock still gives unpredictable, non-repeating bytes, which is
        // better than aborting the driver thread.
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        for chunk in buf.chunks_mut(8) {
            let mut h = RandomState::new().build_hasher();
            h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
            );
            let v = h.finish().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_distinct_random_bytes() {
        let mut e = OsEntropy;
        let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
        e.fill(&mut a);
        e.fill(&mut b);
        assert_ne!(a, b);
        assert_ne!(a, [0u8; 16]);
    }
}
