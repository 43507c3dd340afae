//! Argument conversions from JavaScript values.

use crate::core::LockError;

/// A millisecond (or id) argument from JavaScript: a whole, non-negative,
/// exactly representable number.
pub(crate) fn whole_number(what: &str, value: f64) -> Result<u64, LockError> {
    const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
    if !value.is_finite() || value < 0.0 || value.fract() != 0.0 || value > MAX_SAFE {
        // The value itself is not formatted: f64 Display costs ~12 KiB of wasm,
        // and the JS wrapper's own check already names it.
        return Err(LockError::invalid(format!(
            "{what} must be a whole number ≥ 0 (at most 2^53 - 1)"
        )));
    }
    Ok(value as u64)
}
