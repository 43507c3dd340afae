//! Owner tokens and jitter from `crypto.getRandomValues` (through getrandom's
//! `js` feature: Web Crypto in browsers, workerd and Node 20+).

use crate::core::{Entropy, LockError};

#[derive(Debug, Clone, Copy)]
/// `crypto.getRandomValues` as the core's entropy source.
pub struct JsEntropy;

impl JsEntropy {
    /// Fails when the runtime has no Web Crypto: owner tokens must be
    /// unpredictable, so a client is not built without it.
    pub fn new() -> Result<Self, LockError> {
        let mut probe = [0u8; 16];
        getrandom::getrandom(&mut probe).map_err(|e| {
            LockError::invalid(format!(
                "this runtime has no usable crypto.getRandomValues ({e})"
            ))
        })?;
        Ok(JsEntropy)
    }
}

impl Entropy for JsEntropy {
    fn fill(&mut self, buf: &mut [u8]) {
        if getrandom::getrandom(buf).is_err() {
            // Unreachable after the probe in `new` (Web Crypto does not go away);
            // still never panic: mix the clock and Math.random rather than trap.
            let mut x =
                (js_sys::Date::now() as u64) ^ ((js_sys::Math::random() * u64::MAX as f64) as u64);
            for b in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
        }
    }
}
