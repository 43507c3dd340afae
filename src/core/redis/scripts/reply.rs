//! What the reply parsers of every kind share.

use crate::core::redis::value::RedisValue;

pub(super) fn counter(v: i64) -> Result<u64, String> {
    u64::try_from(v).map_err(|_| format!("negative fencing counter {v}"))
}

/// A reply described without its content (it may hold keys).
pub(super) fn describe(v: &RedisValue) -> String {
    match v {
        RedisValue::Nil => "nil".into(),
        RedisValue::Int(i) => format!("integer {i}"),
        RedisValue::Bulk(b) => format!("string of {} bytes", b.len()),
        RedisValue::Array(a) => format!("array of {}", a.len()),
        RedisValue::Error(e) => format!("error {e:?}"),
    }
}
