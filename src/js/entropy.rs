//! Owner tokens and jitter from `crypto.getRandomValues` (through getrandom's
//! `js` feature: Web Crypto in browsers, workerd and Node 20+).

use crate::core::{Entropy, LockError};

/// `crypto.getRandomValues` as the core's entropy source.
///
/// Bytes come from Web Crypto in blocks of [`POOL`] and are handed out once
/// each, as the `uuid` package pools them: one `getRandomValues` call (through
/// getrandom: a JS call, a typed array and a copy) costs more than the rest of
/// an uncontended acquire's work in the core, and an acquire wants several
/// small fills (owner token, jitter).
pub struct JsEntropy {
    pool: [u8; POOL],
    /// Bytes of `pool` already handed out (`POOL`: empty).
    used: usize,
}

/// Bytes fetched from Web Crypto at a time.
const POOL: usize = 256;

impl std::fmt::Debug for JsEntropy {
    // The pool holds the next owner tokens: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JsEntropy")
    }
}

impl JsEntropy {
    /// Fails when the runtime has no Web Crypto: owner tokens must be
    /// unpredictable, so a client is not built without it.
    pub fn new() -> Result<Self, LockError> {
        let mut pool = [0u8; POOL];
        getrandom::getrandom(&mut pool).map_err(|e| {
            LockError::invalid(format!(
                "this runtime has no usable crypto.getRandomValues ({e})"
            ))
        })?;
        Ok(JsEntropy { pool, used: 0 })
    }

    /// Refills the pool from Web Crypto.
    fn refill(&mut self) {
        if getrandom::getrandom(&mut self.pool).is_err() {
            // Unreachable after the first fill in `new` (Web Crypto does not go
            // away); still never panic: mix the clock and Math.random rather
            // than trap.
            let mut x =
                (js_sys::Date::now() as u64) ^ ((js_sys::Math::random() * u64::MAX as f64) as u64);
            for b in self.pool.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
        }
        self.used = 0;
    }
}

impl Entropy for JsEntropy {
    fn fill(&mut self, buf: &mut [u8]) {
        let mut filled = 0;
        while filled < buf.len() {
            if self.used == POOL {
                self.refill();
            }
            let n = (buf.len() - filled).min(POOL - self.used);
            buf[filled..filled + n].copy_from_slice(&self.pool[self.used..self.used + n]);
            // Each byte is handed out once: wipe it from the pool.
            self.pool[self.used..self.used + n].fill(0);
            self.used += n;
            filled += n;
        }
    }
}
